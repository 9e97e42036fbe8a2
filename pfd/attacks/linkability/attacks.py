"""The linkability family's attacks on a release, as registered scorecard attacks.

* ``linkability``: VisMatch and Rank-1 Re-ID of the proxies, for every attacker
  (:mod:`pfd.attacks.linkability.matching`);
* ``hubness``: the same two with the hubness-corrected ranking (CSLS,
  :mod:`pfd.attacks.linkability.hubness`), the attacker a cross-domain gallery calls for;
* ``source_rank``: the rank-last attack and the test that the source's rank is uniform
  (:mod:`pfd.attacks.linkability.ranks`): a proxy reliably *far* from its source links too;
* ``class_link``: each released class read as a whole (its centroid, the spread of each identity's
  rank across its proxies; :mod:`pfd.attacks.linkability.classes`), one jointly tested figure;
* ``reconstruction``: each proxy's public-model embedding turned back into an image
  (:mod:`pfd.attacks.linkability.reconstruction`), then linked like the proxies.

Each rate row has the gallery's chance and an interval clustered by source identity; each test row
(the source's rank, class-level linking) an exact permutation p-value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from typing import TYPE_CHECKING

from pfd.audit.contract import Check, AuditInputs, CheckResult, option, register_check, summary_row
from pfd.audit.grid import MatchGrid
from pfd.audit.rows import AuditRow
from pfd.config.checks import Checker, outer_key

if TYPE_CHECKING:
    import numpy as np
    import torch

    from pfd.attacks.linkability.classes import AttackerClassLink
    from pfd.attacks.linkability.matching import LinkFigures
    from pfd.attacks.linkability.ranks import AttackerSourceRank

# The attacks' maths (torch) is imported where they run: this module, with its configs, is read by
# the CLI at start-up to make pfd attack's options.

__all__ = ["LinkabilityConfig", "LinkabilityAttack", "HubnessAttack", "SourceRankAttack", "ClassLinkAttack",
           "ClassLinkConfig", "ReconstructionConfig",
           "ReconstructionAttack", "LinkRows"]

_NAMES = {"vismatch": "VisMatch", "reid": "Rank-1 Re-ID", "vismatch_csls": "VisMatch, hubness-corrected",
          "reid_csls": "Rank-1 Re-ID, hubness-corrected", "reid_last": "Rank-last Re-ID",
          "reid_orthogonal": "Orthogonal Re-ID"}
#: The plain attacks whose links a hub (one private identity nearest to most proxies) may draw.
_HUBBED = ("vismatch", "reid")


@dataclass
class LinkRows(CheckResult):
    """Linkability figures: per (target, attacker), one :class:`~pfd.attacks.linkability.matching.LinkabilityResult` per attack.

    Attributes:
        key: Its key in ``report.json`` (a list of :meth:`LinkFigures.as_dict
            <pfd.attacks.linkability.matching.LinkFigures.as_dict>`).
        links: Per attacker and target its :class:`~pfd.attacks.linkability.matching.LinkFigures`.
        attacks: The attack names of each entry, in row order.
        text: Its section of ``report.md``.
    """

    key: str
    links: list[LinkFigures]
    attacks: tuple[str, ...]
    text: list[str] = field(default_factory=list)

    def sections(self) -> dict[str, Any]:
        return {self.key: [link.as_dict() for link in self.links]}

    def rows(self) -> list[AuditRow]:
        from pfd.attacks.linkability.matching import hub_share

        out = []
        for link in self.links:
            for a in self.attacks:
                r = link.results[a]
                # Rates on the proxies state what the audit's design rules out, over the people behind them
                # (pfd.audit.verdict.design_share); a hub is named for the pages and the gate's advice.
                extra: dict[str, object] = {"rule_out": link.target == "proxies", "people": r.clusters}
                if a in _HUBBED:
                    share, hub = hub_share(r)
                    extra.update(hub=hub, hub_share=share)
                out.append(summary_row(f"{_NAMES[a]} ({link.target})", link.attacker, r.rate, r.chance, r.ci95,
                                       "rate", count=r.count, n=r.n, n_eff=r.n_eff, **extra))
        return out

    def markdown(self) -> list[str]:
        return self.text

    def identity_links(self) -> list[LinkFigures]:
        return self.links


class MatchRows(LinkRows):
    """The plain linkability rows, which also show the report's grid of matches (with the
    reconstructions beside their proxies when the reconstruction attack ran)."""

    def grid(self, inputs: AuditInputs, rows: int) -> MatchGrid | None:
        import numpy as np

        from pfd.attacks.linkability.grid import match_grid

        recon = inputs.results.get("reconstruction")
        return match_grid(self.links[0], inputs.sets, inputs.public, inputs.source, getattr(recon, "images", None),
                          getattr(recon, "pick", np.arange(len(inputs.source))), rows)


def _cosine_attackers(inputs: AuditInputs) -> list[tuple[Any, dict[str, "torch.Tensor"]]]:
    """The attackers that rank by cosine, with their embeddings (rank and CSLS attacks are cosine-only)."""
    return [(a, inputs.embeddings(a)) for a in inputs.attackers if a.distance == "cosine"]


def _link(inputs: AuditInputs, target: str, attacker: Any, query: "torch.Tensor", source: "np.ndarray",
          *, chunk: int = 4096) -> LinkFigures:
    """VisMatch and Re-ID of ``query`` against ``attacker``'s embeddings of the private gallery."""
    from pfd.attacks.linkability.matching import LinkFigures, rank1_reid, visual_matching

    gallery = inputs.embeddings(attacker)["private"]
    with inputs.clock.stage("linkability"):
        return LinkFigures(target, attacker.role, {
            "vismatch": visual_matching(query, source, gallery, inputs.labels, chunk=chunk, metric=attacker.distance),
            "reid": rank1_reid(query, source, gallery, inputs.labels, chunk=chunk, metric=attacker.distance)})


@dataclass
class LinkabilityConfig:
    """``linkability``: VisMatch and Rank-1 Re-ID of the proxies.

    Attributes:
        chunk: Gallery chunk of the streamed exact top-1 search (memory, not results).
    """

    chunk: int = option(4096, help="Gallery chunk of the streamed top-1 search.", cli=False)

    def check(self) -> None:
        Checker(self, "attack.linkability.", flags=False).at_least("chunk", 1)


@register_check
class LinkabilityAttack(Check):
    """VisMatch (nearest private image) and Rank-1 Re-ID (nearest identity template) of each proxy,
    by every attacker (PFD paper, "Source-Identity Linkability")."""

    name, title, config = "linkability", "Linkability", LinkabilityConfig
    empty_sections = {"linkability": []}
    embeddings_only, rows_per_attacker = True, 2  # VisMatch, Re-ID

    def applicable(self, inputs: AuditInputs) -> str | None:
        return None

    def run(self, inputs: AuditInputs) -> MatchRows:
        links = [_link(inputs, "proxies", a, inputs.embeddings(a)["proxies"], inputs.source, chunk=self.cfg.chunk)
                 for a in inputs.attackers]
        text = ["", "## Linkability", "",
                "VisMatch: is a proxy's nearest private image of its source identity? Rank-1 Re-ID: is the "
                "nearest identity template its source (cosine attackers: the normalised sum of the unit embeddings of "
                "the identity's images; Euclidean attackers: the plain mean of their raw embeddings, compared by "
                "distance)? The public attacker holds a "
                "public model and the private gallery; the insider also holds the publisher's adapted model "
                "(worst case); other rows are the auditor's own models. Intervals: exact, at the effective sample "
                "size of proxies clustered by source identity (report.json: n_eff, design_effect)."]
        return MatchRows("linkability", links, ("vismatch", "reid"), text)


@dataclass
class HubnessConfig:
    """``hubness``: VisMatch and Re-ID with the CSLS ranking.

    Attributes:
        k: Nearest proxies in each gallery item's hubness (Conneau et al.: 10).
    """

    k: int = option(10, help="CSLS neighbours of the hubness-corrected attacks.", flag="--csls-k")

    def check(self) -> None:
        Checker(self, "attack.hubness.", flags=True, flag_names={"k": "--csls-k"}).at_least("k", 1)


@register_check
class HubnessAttack(Check):
    """VisMatch and Re-ID of each proxy with the hubness-corrected ranking (CSLS), by every cosine
    attacker: a private identity near most proxies (a hub) no longer takes every match."""

    name, title, config = "hubness", "Linkability, hubness-corrected", HubnessConfig
    embeddings_only, rows_per_attacker = True, 2  # VisMatch and Re-ID by CSLS

    def applicable(self, inputs: AuditInputs) -> str | None:
        return None

    def run(self, inputs: AuditInputs) -> LinkRows:
        from pfd.attacks.linkability.hubness import rank1_reid_csls, visual_matching_csls
        from pfd.attacks.linkability.matching import LinkFigures

        links = []
        for a, e in _cosine_attackers(inputs):  # CSLS is a cosine-similarity correction
            with inputs.clock.stage("linkability"):
                links.append(LinkFigures("proxies", a.role, {
                    "vismatch_csls": visual_matching_csls(e["proxies"], inputs.source, e["private"], inputs.labels,
                                                          k=self.cfg.k),
                    "reid_csls": rank1_reid_csls(e["proxies"], inputs.source, e["private"], inputs.labels, k=self.cfg.k)}))
        text = ["", "## Linkability, hubness-corrected", "",
                f"The same two attacks ranked by CSLS (k = {self.cfg.k}): a gallery item's similarity is discounted by "
                "its mean similarity to its nearest proxies, so a private identity near most proxies (a hub) no longer "
                "takes every match. Proxies and private photos are two domains, where hubs form."]
        return LinkRows("hubness", links, ("vismatch_csls", "reid_csls"), text)


@dataclass
class SourceRankResult(CheckResult):
    """The rank-last attack and the uniformity test, per attacker."""

    tests: list[AttackerSourceRank]

    def sections(self) -> dict[str, Any]:
        return {"source_rank": self.tests}

    def rows(self) -> list[AuditRow]:
        out = []
        for t in self.tests:
            last, by = t["reid_last"], t["by"]
            name = "Rank-last Re-ID" if by == "cos" else "Orthogonal Re-ID"
            test = "Source rank uniform (proxies): mean rank" if by == "cos" else "Source rank by absolute cosine uniform (proxies): mean rank"
            out.append(summary_row(f"{name} (proxies)", t["attacker"], last["rate"], last["chance"], last["ci95"],
                                   "rate", count=last["count"], n=last["n"], n_eff=last["n_eff"], rule_out=True,
                                   people=last["clusters"]))
            out.append(summary_row(test, t["attacker"], t["mean_rank"], t["chance_mean_rank"], t["mean_rank_ci95"], "score",
                                   test_p=t["p"], p_floor=t["p_floor"], data_floor=t["data_floor"],
                                   setting=f"[{outer_key('attack.source_rank')}] permutations"))
        return out

    def markdown(self) -> list[str]:
        return ["", "## Rank of the source", "",
                "Where each proxy's source ranks among the private identity templates (0 nearest, 1 farthest; by |cos|: 0 "
                "the largest |cos|, 1 the most orthogonal): uniform for a release at chance. Rank-last Re-ID names the "
                "farthest identity, Orthogonal Re-ID the most orthogonal one; the uniformity test is a "
                "permutation test of the ranks' histogram (each source's proxies moved together to another identity), "
                "whose p-value gives the verdict; the mean rank's interval is over source identities."]


@dataclass
class SourceRankConfig:
    """``source_rank``: the rank-last and orthogonal attacks and the uniformity tests (by cos and by |cos|).

    Attributes:
        permutations: Permutation draws of each uniformity test (its smallest p-value is
            ``1 / (permutations + 1)``, which must reach the audit's per-figure level: the verdict
            refuses fewer, naming the value that works).
    """

    permutations: int = option(20000, help="Permutation draws of the source-rank uniformity test.", cli=False)

    def check(self) -> None:
        Checker(self, "attack.source_rank.", flags=False).at_least("permutations", 1)


@register_check
class SourceRankAttack(Check):
    """Where the source ranks: a release linked by being reliably *far* from its sources is linkable too."""

    name, title, config = "source_rank", "Rank of the source", SourceRankConfig
    embeddings_only, rows_per_attacker = True, 4  # rank-last, orthogonal Re-ID, the rank tests by cos and |cos|

    @classmethod
    def page(cls, data: Mapping[str, Any]) -> list[str]:
        from pfd.attacks.scorecard.html import rank_histogram

        ranks = rank_histogram(data.get("source_rank") or [])
        if not ranks:
            return []
        return ["<h2>Rank of the source</h2>", ranks,
                '<p class="muted">Uniform for a release at chance: a proxy reliably near (or far from) its source '
                "would pile up at one end.</p>"]

    def applicable(self, inputs: AuditInputs) -> str | None:
        return None

    def run(self, inputs: AuditInputs) -> SourceRankResult:
        from pfd.attacks.linkability.ranks import AttackerSourceRank, source_rank_test

        tests = []
        for a, e in _cosine_attackers(inputs):
            for by in ("cos", "abs"):
                with inputs.clock.stage("linkability"):
                    t = source_rank_test(e["proxies"], inputs.source, e["private"], inputs.labels,
                                         permutations=self.cfg.permutations, seed=inputs.cfg.seed, by=by)
                tests.append(AttackerSourceRank(attacker=a.role, **t))
        return SourceRankResult(tests)


@dataclass
class ClassLinkResult(CheckResult):
    """The class-level attacks, per attacker (:func:`pfd.attacks.linkability.classes.class_link_test`)."""

    tests: list[AttackerClassLink]

    def sections(self) -> dict[str, Any]:
        return {"class_link": self.tests}

    def rows(self) -> list[AuditRow]:
        # One figure per attacker: the best of the seven attacks, tested with the max-statistic's
        # exact permutation null (its interval would ignore the selection, so the row shows the
        # null's 95th percentile instead).
        return [summary_row(f"Class-level linking, best of {len(t['attacks'])} (classes)", t["attacker"], t["rate"],
                            t["chance"], None, "score", test_p=t["p"], p_floor=t["p_floor"], data_floor=t["data_floor"],
                            null95=t["null95"], count=t["count"], n=t["classes"], best=t["best"],
                            setting=f"[{outer_key('attack.class_link')}] permutations") for t in self.tests]

    def markdown(self) -> list[str]:
        from pfd.attacks.linkability.classes import CLASS_ATTACKS

        out = ["", "## Class-level linking", "",
               "An attacker who reads each released class as a whole (its proxies share one source) names one identity "
               "per class: " + "; ".join(f"`{k}`, {v}" for k, v in CLASS_ATTACKS.items()) + ". The figure is the best "
               "attack's share of classes linked; its p-value is the permutation test of the largest count (classes "
               "moved to random identities), so the seven attacks are one figure.", "",
               "| attacker | " + " | ".join(CLASS_ATTACKS) + " |", "|---|" + "---|" * len(CLASS_ATTACKS)]
        for t in self.tests:
            out.append(f"| {t['attacker']} | " + " | ".join(
                f"{t['attacks'][k]['count']}/{t['classes']}" for k in CLASS_ATTACKS) + " |")
        out += ["", "How tight the classes are in each model: the mean cosine of two proxies of one class (two photos of "
                "one person), its excess over two unrelated ones, and the spread sigma of the verdict's null simulation "
                "with the same excess (`pfd.attacks.linkability.spread`; the calibration covers sigma 0.02 to 0.5, "
                "docs/benchmarks.md). Tight classes make each rate count about one trial per class.", "",
                "| attacker | proxies: cos within | excess | sigma | private photos: cos within | excess | sigma |",
                "|---|---|---|---|---|---|---|"]
        for t in self.tests:
            cells = [f"{s['within']:.3f} | {s['excess']:.3f} | {s['sigma']:.3g}" if s else "– | – | –"
                     for s in (t["spread"].get("proxies"), t["spread"].get("private"))]
            out.append(f"| {t['attacker']} | " + " | ".join(cells) + " |")
        return out


@dataclass
class ClassLinkConfig:
    """``class_link``: the class-level attacks and their joint permutation test.

    Attributes:
        permutations: Permutation draws (its smallest p-value is ``1 / (permutations + 1)``, which
            must reach the audit's per-figure level).
    """

    permutations: int = option(20000, help="Permutation draws of the class-level linking test.", cli=False)

    def check(self) -> None:
        Checker(self, "attack.class_link.", flags=False).at_least("permutations", 1)


@register_check
class ClassLinkAttack(Check):
    """Each released class read as a whole: its centroid's nearest, farthest and most orthogonal identity,
    and the identity whose rank varies most or least across its proxies, by every cosine attacker."""

    name, title, config = "class_link", "Class-level linking", ClassLinkConfig
    embeddings_only, rows_per_attacker = True, 1  # the best of the class-level attacks

    def applicable(self, inputs: AuditInputs) -> str | None:
        return None

    def run(self, inputs: AuditInputs) -> ClassLinkResult:
        from pfd.attacks.linkability.classes import AttackerClassLink, class_link_test
        from pfd.attacks.linkability.spread import class_spread

        tests = []
        for a, e in _cosine_attackers(inputs):
            with inputs.clock.stage("linkability"):
                t = class_link_test(e["proxies"], inputs.source, e["private"], inputs.labels,
                                    permutations=self.cfg.permutations, seed=inputs.cfg.seed)
            # None (left out) where a part has no class of two members, e.g. one proxy per identity.
            spread = {part: s for part, labels in (("proxies", inputs.source), ("private", inputs.labels))
                      if (s := class_spread(e[part], labels)) is not None}
            tests.append(AttackerClassLink(attacker=a.role, spread=spread, **t))
        return ClassLinkResult(tests)


@dataclass
class ReconstructionConfig:
    """``reconstruction``: the BN-prior inversion of each proxy's public-model embedding, then linked.

    Attributes:
        enabled: Run it.
        iterations: Adam steps per batch.
        batch_size: Images inverted together.
        lr: Peak learning rate.
        lambda_bn: Weight of the BatchNorm prior.
        limit: Reconstruct at most this many proxies (a seeded sample; 0 = all). The audit's
            default, 64 proxies at 50 steps, is the privacy-utility benchmark's protocol: every
            proxy at 100 steps took 45 min of 2 cores on 300 MobileFaceNet proxies, and the gate
            runs it on every distillation.
    """

    enabled: bool = option(True, help="Run the reconstruction attack (default on).", flag="--reconstruct")
    iterations: int = option(50, help="Inversion steps per batch.")
    batch_size: int = option(64, help="Images inverted together.")
    lr: float = option(0.1, help="Inversion learning rate.")
    lambda_bn: float = option(0.01, help="Weight of the BatchNorm prior.")
    limit: int = option(64, help="Reconstruct at most N proxies (seeded sample; 0 = all).")

    def check(self) -> None:
        c = Checker(self, "attack.reconstruction.", flags=True, flag_names={
            "iterations": "--recon-iterations", "batch_size": "--recon-batch-size", "lr": "--recon-lr",
            "lambda_bn": "--recon-lambda-bn", "limit": "--recon-limit"})
        c.at_least("iterations", 1)
        c.at_least("batch_size", 1)
        c.positive("lr")
        c.non_negative("lambda_bn")
        c.at_least("limit", 0)


@dataclass
class ReconstructionRows(LinkRows):
    """The reconstructions' linkability rows, the inversion's settings, and the images for the grid."""

    info: dict[str, Any] = field(default_factory=dict)
    images: "torch.Tensor | None" = None
    pick: "np.ndarray | None" = None

    def sections(self) -> dict[str, Any]:
        return {"reconstruction": self.info, **super().sections()}

    def identity_links(self) -> list[LinkFigures]:
        return []  # the per-identity table counts the proxies' own links

    def markdown(self) -> list[str]:
        rec = self.info
        extra = f", final cosine to the targets {rec['final_cosine_mean']:.3f}" if "final_cosine_mean" in rec else ""
        return ["", f"Reconstructions: `{rec.get('method')}` on {rec.get('n')} of {rec.get('of')} proxies "
                f"(public-model embeddings){extra}. A BN-prior inversion matches the public model's embedding by "
                "construction, so the public row on reconstructions mostly repeats the direct attack; the insider "
                "row shows whether the reconstructions carry identity to another model."]


def subsample(n: int, limit: int, seed: int) -> "np.ndarray":
    """At most ``limit`` of ``range(n)`` (a seeded sample, sorted); all when ``limit <= 0``."""
    import numpy as np

    if limit <= 0 or n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 7]).choice(n, size=limit, replace=False))


@register_check
class ReconstructionAttack(Check):
    """Each proxy's public-model embedding turned back into an image, linked by every attacker
    (the PFD paper's post-release reconstruction stress test, Fig. 5)."""

    name, title, config = "reconstruction", "Reconstruction", ReconstructionConfig
    empty_sections = {"reconstruction": {}}
    flag_prefix = "recon"

    def applicable(self, inputs: AuditInputs) -> str | None:
        if not self.cfg.enabled:
            return "disabled (--no-reconstruct)"
        public = inputs.public
        if inputs.reconstructor is None and not public.has_batchnorm:
            return (f"the public model {public.path} has no BatchNorm layers for the BN prior (TorchScript hides "
                    "them); plug in a reconstructor")
        return None

    def run(self, inputs: AuditInputs) -> ReconstructionRows:
        import numpy as np

        from pfd.attacks.linkability.reconstruction import BNInversion, check_reconstructions

        c, public = self.cfg, inputs.public
        pick = subsample(len(inputs.source), c.limit, inputs.cfg.seed)
        if inputs.reconstructor is None:
            recon: Any = BNInversion(public.model, size=public.size, iterations=c.iterations, batch_size=c.batch_size,
                                     lr=c.lr, lambda_bn=c.lambda_bn, seed=inputs.cfg.seed,
                                     device=public.embedder.device, progress=inputs.progress)
            info = recon.settings()
        else:
            recon = inputs.reconstructor
            info = {"method": getattr(recon, "__name__", type(recon).__name__)}
        targets = inputs.embeddings(public)["proxies"][pick]
        with inputs.clock.stage("reconstruction"):
            images = check_reconstructions(recon(targets), len(pick))
        if isinstance(recon, BNInversion):
            info["final_cosine_mean"] = float(np.mean([h["cosine"] for h in recon.history]))
        info.update(n=int(len(pick)), of=int(len(inputs.source)))
        links = []
        for a in inputs.attackers:
            with inputs.clock.stage("embed"):
                query = a.embed(images)  # (n, D)
            links.append(_link(inputs, "reconstructions", a, query, inputs.source[pick]))
        return ReconstructionRows("linkability", links, ("vismatch", "reid"), info=info, images=images, pick=pick)
