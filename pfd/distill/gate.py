"""The publication gate: the checks a release must pass before ``pfd distill`` writes it.

A release is the last thing a run writes, and only when the pipeline's own attacks cannot link it
(DESIGN, *Publication gate*). The checks, on the released (uint8) pixels:

* ``ogp_margin`` (``pfd`` only): the share of private embeddings with ``|cos(M e, e)| < m`` after
  OGP (eq. 3's margin) reaches ``OGPConfig.target_below_margin``. Below it the rotation has not
  moved the private identities away from their source coordinates, which is what keeps the
  insider at chance.
* ``insider_vismatch`` / ``insider_reid``: the publisher's adapted model embeds proxies and private
  images; Visual Matching (nearest private image) and Rank-1 Re-ID (nearest identity template)
  must not link proxies to their source identity above chance.
* ``public_vismatch`` / ``public_reid``: the same with the public model an outside attacker has.
* ``*_vismatch_csls`` / ``*_reid_csls``: the same attacks with the hubness-corrected ranking
  (CSLS, :mod:`pfd.attacks.linkability.hubness`), for every model: a stronger attacker where a
  few private identities are the nearest match of most proxies (a hub). A plain check refused only
  by its rule-out because of a hub takes its CSLS counterpart's verdict (:func:`defer_hubs`).

* ``judge_competence``: the judge recognises the private people (leave-one-out identification
  clearly above chance), or its checks below would vouch for nothing;
* ``judge_vismatch`` / ``judge_reid``: the same with a judge, a face model that no loss of the run
  has seen (``release.judge``). When RTA optimises against the public model (``rta.lambda_delink``)
  the public checks measure the loss's own target, so the judge is what vouches for them.

A linkability check fails when it shows the proxies linked above chance (LEAKS) or when its
95 % interval cannot rule out ``rule_out`` (5) times chance (unresolved), with the intervals and
chance of :mod:`pfd.attacks.linkability.matching`: an exact binomial interval at the effective
sample size of proxies clustered by source identity, chance from the gallery's composition.

**Family-wise false refusals.** With ``m`` linkability checks (four per model) each tested at 95 %, a release at
chance is refused whenever any one of them fires by luck: about 1-2 % a check, 4-6 % for the
gate, whatever the numbers of identities and proxies (``python -m benchmarks.gate_power --whole-gate``).
So LEAKS is decided on the one-sided lower end at level ``release.alpha / m`` (Bonferroni: the
whole gate refuses a release at chance through LEAKS in at most ``alpha`` = 0.1 % of audits),
while what a release must rule out keeps the scorecard's 95 % upper end: publishing still needs
every check to exclude 5x chance. The price is power against small leaks (a release linked at
2x chance is refused less often), which the demo buys back with more proxies per identity
(docs/distill.md, *What the gate can rule out*).

"Not shown above chance" is not "at chance": the upper end is the largest linkage rate the audit
does not exclude. Chance successes number about ``K`` (proxies per identity), so this is a matter
of ``K`` more than of the number of identities (the power table of docs/distill.md).

Each check also says why it failed, from what it measured: the linked proxies' sources (one source
whose K proxies all link is a cluster, not a spread), and a *hub*, a private identity that is the
nearest match of a large share of all proxies (its own proxies then link by construction).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.errors import PfdError

__all__ = ["RULE_OUT", "ALPHA", "HUB_SHARE", "ATTACKS", "defer_hubs", "PublicationRefused", "interval_verdict", "linkability_check", "link_diagnostics",
           "margin_check", "competence_check", "publication_checks", "failed_checks", "failure_cause", "format_checks",
           "refusal_message"]


class PublicationRefused(PfdError):
    """The gate failed: nothing was published. ``summary`` is the run's ``summary.json``.

    ``pfd distill`` exits with status 3 for it (:attr:`exit_code`), not the 2 of a usage error.
    """

    exit_code = 3

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary or {}


def margin_check(below_margin: float, target: float) -> dict[str, Any]:
    """The ``ogp_margin`` check: ``below_margin >= target``.

    Args:
        below_margin: Share of private images with ``|cos(M e, e)| < m`` (eq. 3).
        target: The share OGP must reach.
    """
    return {"name": "ogp_margin", "value": float(below_margin), "target": float(target),
            "passed": bool(below_margin >= target)}  # fmt: skip


#: Default multiple of chance a check's interval must exclude (``ReleaseConfig.rule_out``).
RULE_OUT = 5.0
#: Default family-wise rate at which the gate's LEAKS tests refuse a release at chance (``ReleaseConfig.alpha``).
ALPHA = 0.001
#: A design effect from this on says the links cluster by source (the K proxies of a linked source link together).
CLUSTERED_DEFF = 2.0
#: A private identity that is the nearest match of at least this share of all proxies is a hub.
HUB_SHARE = 0.25
#: The attacks each model's checks run: VisMatch, Re-ID and their hubness-corrected (CSLS) forms.
ATTACKS = ("vismatch", "reid", "vismatch_csls", "reid_csls")


def linkability_check(
    name: str, attack: str, proxy_emb: torch.Tensor, proxy_source: np.ndarray, private_emb: torch.Tensor,
    private_labels: np.ndarray, *, rule_out: float = RULE_OUT, leak_alpha: float = 0.025,
) -> dict[str, Any]:
    """One linkability check with the attack suite's own attack, interval and chance.

    Args:
        name: Check name (e.g. ``public_reid``).
        attack: ``"vismatch"``, ``"reid"`` or their hubness-corrected forms ``"vismatch_csls"``,
            ``"reid_csls"`` (:mod:`pfd.attacks.linkability.hubness`).
        proxy_emb: Normalised proxy embeddings ``(n, D)``.
        proxy_source: Source identity of each proxy ``(n,)`` (labels of ``private_labels``).
        private_emb: Normalised private embeddings ``(m, D)``.
        private_labels: Identity of each private image ``(m,)``.
        rule_out: The 95 % interval must exclude rates above this multiple of chance (0: no such rule).
        leak_alpha: One-sided level of the LEAKS test (the gate's ``alpha / m``; 0.025 is the
            lower end of the scorecard's two-sided 95 % interval).

    Returns:
        ``name``, ``rate``, ``count``, ``n``, ``chance``, ``ci95``, ``leak_low`` (the lower end of
        the LEAKS test), ``leak_alpha``, ``leaks``, ``bound_multiple`` (the 95 % upper end /
        chance: what the check cannot rule out), ``unresolved``, ``passed`` and the diagnostics
        of :func:`link_diagnostics`.
    """
    from pfd.attacks.linkability.hubness import rank1_reid_csls, visual_matching_csls
    from pfd.attacks.linkability.matching import rank1_reid, visual_matching
    from pfd.attacks.metrics import clustered_interval

    fn = {"vismatch": visual_matching, "reid": rank1_reid, "vismatch_csls": visual_matching_csls,
          "reid_csls": rank1_reid_csls}[attack]
    r = fn(proxy_emb, proxy_source, private_emb, private_labels)
    src = np.asarray(proxy_source).ravel()
    low = clustered_interval(r.success, src, alpha=2 * leak_alpha)["ci95"][0]  # one-sided leak_alpha
    return {"name": name, "rate": float(r.rate), "count": int(r.count), "n": int(r.n),
            **interval_verdict(r.ci95, r.chance, rule_out=rule_out, leak_low=low), "leak_alpha": float(leak_alpha),
            "design_effect": float(r.design_effect), **link_diagnostics(r.predicted, src, r.success)}  # fmt: skip


def link_diagnostics(predicted: np.ndarray, source: np.ndarray, success: np.ndarray) -> dict[str, Any]:
    """What a check's links are made of (pure): where they come from and whether a hub draws them.

    Args:
        predicted: ``(n,)`` identity the attack named for each proxy.
        source: ``(n,)`` each proxy's source identity.
        success: ``(n,)`` bool, ``predicted == source``.

    Returns:
        ``hit_sources`` (distinct sources among the linked proxies), ``top_hit_share`` (share of
        the links that come from the most linked source), ``hub_share`` (the largest share of all
        proxies named as one identity) and ``hub`` (whether that share reaches :data:`HUB_SHARE`
        and at least twice that identity's fair share ``1 / N``).
    """
    predicted, source, success = np.asarray(predicted), np.asarray(source), np.asarray(success, bool)
    n = max(int(success.size), 1)
    _, hits = np.unique(source[success], return_counts=True)
    _, named = np.unique(predicted, return_counts=True)
    n_ids = max(int(np.unique(source).size), 1)
    hub_share = float(named.max() / n) if named.size else 0.0
    return {"hit_sources": int(hits.size), "top_hit_share": float(hits.max() / hits.sum()) if hits.size else 0.0,
            "hub_share": hub_share, "hub": bool(hub_share >= max(HUB_SHARE, 2.0 / n_ids))}


def interval_verdict(ci95: Any, chance: float, *, rule_out: float = RULE_OUT, leak_low: float | None = None) -> dict[str, Any]:
    """The gate's verdict on one linkability interval (pure).

    Args:
        ci95: ``(low, high)`` of the linkage rate (95 %).
        chance: The rate of an attacker who guesses.
        rule_out: Multiple of chance the interval must exclude (0: no such rule).
        leak_low: Lower end of the LEAKS test when it is made at another level than ``ci95``
            (the gate's family-wise one); ``None`` uses ``ci95``'s.

    Returns:
        ``chance``, ``ci95``, ``leak_low``, ``leaks`` (``leak_low > chance``), ``bound_multiple``
        (``high / chance``), ``rule_out``, ``unresolved`` (``bound_multiple > rule_out``) and
        ``passed`` (neither).
    """
    lo, hi = (float(v) for v in ci95)
    low = lo if leak_low is None else float(leak_low)
    chance = float(chance)
    leaks = low > chance
    bound = hi / chance if chance > 0 else float("inf")
    unresolved = bool(rule_out) and bound > rule_out
    return {"chance": chance, "ci95": [lo, hi], "leak_low": low, "leaks": bool(leaks), "bound_multiple": float(bound),
            "rule_out": float(rule_out), "unresolved": bool(unresolved), "passed": not leaks and not unresolved}


#: A judge must identify the private people (leave one out) at this many times chance, the lower end of its
#: 95 % interval: a model that recognises nobody links nothing, and its checks would read "at chance".
JUDGE_COMPETENCE = 3.0


def competence_check(name: str, private_emb: torch.Tensor, private_labels: np.ndarray, *,
                     multiple: float = JUDGE_COMPETENCE) -> dict[str, Any]:
    """Whether a model recognises the private people: leave-one-out rank-1 identification of every
    private image among the others (its nearest other image's identity), against chance.

    Args:
        name: Check name (``judge_competence``).
        private_emb: ``(m, D)`` normalised private embeddings by the model.
        private_labels: ``(m,)`` identities.
        multiple: The lower end of the 95 % interval must exceed this many times chance.

    Returns:
        ``name``, ``rate``, ``count``, ``n``, ``chance`` (of naming the right identity by a random
        other image), ``ci95``, ``multiple`` and ``passed``.
    """
    from pfd.attacks.metrics import wilson_interval

    e = private_emb.double()
    labels = np.asarray(private_labels)
    sims = e @ e.T
    sims.fill_diagonal_(-float("inf"))
    nearest = sims.argmax(1).numpy()
    hit = labels[nearest] == labels
    m = labels.size
    _, counts = np.unique(labels, return_counts=True)
    chance = float(((counts - 1) * counts).sum() / max(m * (m - 1), 1))  # a random other image of the same person
    lo, hi = wilson_interval(int(hit.sum()), m)
    return {"name": name, "rate": float(hit.mean()), "count": int(hit.sum()), "n": int(m), "chance": chance,
            "ci95": [lo, hi], "multiple": float(multiple), "passed": bool(lo > multiple * chance)}


def publication_checks(
    *,
    proxy_source: np.ndarray,
    private_labels: np.ndarray,
    insider: tuple[torch.Tensor, torch.Tensor],
    public: tuple[torch.Tensor, torch.Tensor] | None,
    judge: tuple[torch.Tensor, torch.Tensor] | None = None,
    below_margin: float | None = None,
    target: float | None = None,
    rule_out: float = RULE_OUT,
    alpha: float = ALPHA,
) -> list[dict[str, Any]]:
    """Every check of the gate.

    Args:
        proxy_source: Source identity of each proxy ``(n,)``.
        private_labels: Identity of each private image ``(m,)``.
        insider: ``(proxy_emb (n, D), private_emb (m, D))`` with the adapted model.
        public: The same with the public model (``None`` skips the public checks).
        judge: The same with the judge (``None``: no judge).
        below_margin: OGP's share below eq. 3's margin (``None``: no rotation, no check).
        target: Its target.
        rule_out: Multiple of chance each linkability interval must exclude (:func:`linkability_check`).
        alpha: Family-wise rate of false LEAKS refusals at chance, split evenly over the
            linkability checks (Bonferroni).

    Returns:
        One dict per check, in a fixed order.
    """
    checks = []
    if below_margin is not None and target is not None:
        checks.append(margin_check(below_margin, target))
    models = [(who, pair) for who, pair in (("insider", insider), ("public", public), ("judge", judge)) if pair is not None]
    leak_alpha = alpha / (len(ATTACKS) * len(models)) if models else alpha
    if judge is not None:
        checks.append(competence_check("judge_competence", judge[1], private_labels))
    for who, pair in models:
        for attack in ATTACKS:
            checks.append(linkability_check(f"{who}_{attack}", attack, pair[0], proxy_source, pair[1], private_labels,
                                            rule_out=rule_out, leak_alpha=leak_alpha))
    return defer_hubs(checks)


def defer_hubs(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A plain check that fails only its rule-out because of a hub takes its CSLS counterpart's rule-out (pure).

    A hub makes the plain attack name one identity for nearly every proxy: its own proxies "link"
    by construction, all from one source, and the clustered interval then measures the attack's
    degeneracy rather than the release (an own-data benchmark: 10 of 300, at chance, refused at an
    upper end of 17 %). The hubness-corrected attack of the same model ranks without the hub; when
    it passes, so does the plain check, marked ``deferred_to``. LEAKS is never deferred: a plain
    attack that shows links above chance still refuses.

    Args:
        checks: The gate's checks (modified in place).

    Returns:
        ``checks``.
    """
    by_name = {c["name"]: c for c in checks}
    for c in checks:
        partner = by_name.get(f"{c['name']}_csls")
        if (partner is not None and not c["passed"] and c.get("hub") and not c.get("leaks", True)
                and partner["passed"]):
            c["passed"] = True
            c["deferred_to"] = partner["name"]
    return checks


def failed_checks(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checks that did not pass."""
    return [c for c in checks if not c["passed"]]


def failure_cause(c: dict[str, Any]) -> str:
    """Why a linkability check failed, from what it measured (one phrase)."""
    if c.get("leaks", True):
        return "above chance"
    why = f"cannot rule out {c['bound_multiple']:.1f}x chance, more than {c['rule_out']:g}x"
    if c.get("hub"):
        return (f"{why}: a hub, one private identity the nearest match of {c['hub_share']:.0%} of all proxies, "
                "links its own proxies by construction")
    if c.get("count", 0) and (clustered(c) or c.get("design_effect", 1.0) >= CLUSTERED_DEFF):
        n = c["hit_sources"]
        return (f"{why}: {c['count']} links from {n} source identit{'y' if n == 1 else 'ies'}, clustered by source "
                f"(design effect {c.get('design_effect', 1.0):.1f}), not spread as chance would")
    return f"{why}: too few proxies per identity"


def clustered(c: dict[str, Any]) -> bool:
    """Whether a check's links come from one or two sources (most of them from one)."""
    return bool(c.get("count", 0)) and c.get("top_hit_share", 0.0) >= 0.5 and c.get("hit_sources", 9) <= 2


def format_checks(checks: list[dict[str, Any]]) -> str:
    """One line per check, e.g. ``public_reid 8.3% (CI 4.6-14.7%, chance 4.2%; rules out > 3.5x chance) passed``.

    The upper end of the interval is what the audit can rule out: a rate above it is excluded, a
    rate below it is not, whatever the point estimate says.
    """
    lines = []
    for c in checks:
        verdict = "passed" if c["passed"] else "FAILED"
        if c["name"] == "ogp_margin":
            lines.append(f"{c['name']:<21} {c['value']:.3f} below the repulsion margin (target {c['target']:.2f}) {verdict}")
        elif c["name"] == "judge_competence":
            lines.append(f"{c['name']:<21} identifies {100 * c['rate']:.1f}% of the private images (CI {100 * c['ci95'][0]:.1f}-"
                         f"{100 * c['ci95'][1]:.1f}%, chance {100 * c['chance']:.1f}%; needs > {c['multiple']:g}x) {verdict}")
        else:
            lo, hi = c["ci95"]
            bound = c.get("bound_multiple")
            rules = f"; rules out > {bound:.1f}x chance" if bound is not None and np.isfinite(bound) else ""
            why = "" if c["passed"] else f" ({failure_cause(c)})"
            if c.get("deferred_to"):
                why = f" (a hub draws {c['hub_share']:.0%} of the matches; ruled out by {c['deferred_to']})"
            lines.append(f"{c['name']:<21} {100 * c['rate']:.1f}% (CI {100 * lo:.1f}-{100 * hi:.1f}%, "
                         f"chance {100 * c['chance']:.1f}%{rules}) {verdict}{why}")  # fmt: skip
    return "\n".join(lines)


def refusal_message(failed: list[dict[str, Any]], cfg: Any, state_dir: Path) -> str:
    """The one-line reason a release was not published, with the fix for the cause it measured.

    Args:
        failed: The checks that failed (:func:`failed_checks`).
        cfg: The run's :class:`~pfd.config.DistillConfig`.
        state_dir: Where the state is kept (for ``--resume``).
    """
    from pfd.distill.methods import get_method

    parts = []
    for c in failed:
        if c["name"] == "judge_competence":
            parts.append(f"the judge identifies only {c['rate']:.1%} of the private images (chance {c['chance']:.1%}), so its "
                         "checks would vouch for nothing; pass a --judge that recognises these faces")
        elif c["name"] == "ogp_margin":
            parts.append(f"OGP left {1 - c['value']:.0%} of the private embeddings above the repulsion margin "
                         f"(target {c['target']:.0%} below)")  # fmt: skip
        elif c.get("leaks", True):
            parts.append(f"{c['name']} links {c['rate']:.1%} of the proxies, above chance {c['chance']:.1%} "
                         f"(at least {c.get('leak_low', c['ci95'][0]):.1%} at the gate's family-wise level; "
                         f"95% CI {c['ci95'][0]:.1%}-{c['ci95'][1]:.1%})")  # fmt: skip
        else:
            cause = failure_cause(c).split(": ", 1)
            parts.append(f"{c['name']} cannot rule out linking {c['ci95'][1]:.1%} of the proxies "
                         f"({c['bound_multiple']:.1f}x chance {c['chance']:.1%}, more than the {c['rule_out']:g}x "
                         f"the release must exclude{': ' + cause[1] if len(cause) > 1 else ''})")  # fmt: skip
    links = [c for c in failed if c["name"] not in ("ogp_margin", "judge_competence")]
    keep = f"The state is kept in {state_dir}"
    if all(c["name"] == "judge_competence" for c in failed):
        return (f"not published: {'; '.join(parts)}. {keep}: rerun with --resume and another --judge (a face model "
                "no loss sees that recognises the private people), or --allow-linkable to publish anyway")
    if links and len(links) == len(failed) and all(not c.get("leaks", True) for c in links):
        if any(c.get("hub") for c in links):
            fix = ("one private identity draws most matches (a hub, docs/distill.md#hubs): check it for duplicates "
                   "or a broken image, or pass --resume --allow-linkable to publish anyway")
        elif get_method(cfg.method).decouples and any("clustered by source" in failure_cause(c) for c in links):
            fix = ("the links cluster by source, a residual link rather than too small an audit: distill again into a "
                   "new --state-dir with the de-linking term (--lambda-delink 10 --judge CKPT), or pass --resume "
                   "--allow-linkable to publish anyway")
        else:
            # The audit is too small to show the proxies unlinkable: more proxies per identity fixes it.
            fix = (f"distill again into a new --state-dir with more proxies per identity (--ipc; K = {cfg.rta.ipc} now, "
                   "the power table in docs/distill.md wants K >= 3), or pass --resume --allow-linkable to publish anyway")
        return f"not published: {'; '.join(parts)}. {keep}: {fix}"
    if get_method(cfg.method).decouples:
        public_leak = any(c["name"].startswith("public_") and c.get("leaks", True) for c in links)
        fix = ("rerun with --resume and a longer OGP schedule (--ogp-steps, e.g. twice counts.ogp_steps of "
               "summary.json), or pass --allow-linkable to publish anyway")
        if public_leak and not cfg.rta.lambda_delink:
            fix = ("distill again into a new --state-dir with the de-linking term against the public model "
                   "(--lambda-delink 10 --judge CKPT), or " + fix)
    else:
        fix = (f"--method {cfg.method} does not decouple the proxies from their sources (it is an ablation or "
               "baseline row): use --method pfd, or pass --resume --allow-linkable to publish it anyway")
    return f"not published: {'; '.join(parts)}. {keep}: {fix}"
