"""``membership``: membership of a release's people, through a model trained on it, as a scorecard attack.

A downstream model is trained on public data + the release (:mod:`pfd.attacks.membership.downstream`),
then the geometric MIA (:func:`pfd.attacks.membership.audit.membership_audit`) asks whether the
private identities (members) sit tighter in it than same-domain held-out ones (non-members). One
summary row: the max-T permutation test over the four statistics and the fused classifier
(``inconclusive`` when the public model, which saw neither group, already separates them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pfd.audit.contract import Check, AuditInputs, CheckResult, option, register_check, summary_row
from pfd.audit.rows import AuditRow
from pfd.config import config_to_dict
from pfd.config.checks import Checker, outer_key
from pfd.errors import PfdError

# The audit (torch, scikit-learn) is imported where it runs: the CLI reads this module's config at start-up.

__all__ = ["MembershipConfig", "MembershipAttack", "MembershipResult", "membership_row"]

_NAMES = {"pair_cos": "PairCos", "vmf_kappa": "vMF κ", "pen_logit": "PenLogit", "proto_ce": "ProtoCE"}


def membership_row(mem: Mapping[str, Any], attacker: str = "downstream") -> AuditRow | None:
    """The summary row of a membership report: its permutation-test verdict (None for old reports)."""
    v = mem.get("verdict")
    if not v:
        return None
    name = _NAMES.get(v["statistic"], v["statistic"])
    t1, t01 = v["tpr_at_1pct_fpr"], v["tpr_at_0.1pct_fpr"]
    row = summary_row(f"Membership: max AUC of 4 statistics + fusion (a priori; best {name})", attacker, v["auc"], 0.5,
                      None, "auc", test_p=v["p"], null95=v["null95"], tpr_at_1pct_fpr=t1["tpr"],
                      tpr_at_01pct_fpr=t01["tpr"], tpr_resolvable=[t1["resolvable"], t01["resolvable"]],
                      p_floor=1.0 / (int(v["permutations"]) + 1) if "permutations" in v else None,
                      setting="[attack.membership] permutations")
    if v.get("inconclusive"):  # the reference model already separates the groups (pfd.attacks.membership.reference)
        row.verdict = "inconclusive"
        row.extra["reference_p"] = (mem.get("reference") or {}).get("p")
    return row


@dataclass
class MembershipConfig:
    """``membership``: the downstream membership test.

    Attributes:
        public: Public training data of the downstream model (empty: skip the test).
        holdout: Same-domain held-out identities: the non-members.
        folds: Cross-validation folds of the fused classifier.
        permutations: Permutation draws of the max-T test.
        downstream: :class:`~pfd.config.TrainConfig` settings of the downstream model
            (``[attack.membership.downstream]``), over :data:`~pfd.config.ATTACK_DOWNSTREAM_DEFAULTS`.
    """

    public: str = option("", help="Public data for the downstream membership test (with --holdout).", flag="--public")
    holdout: str = option("", help="Same-domain held-out identities: non-members of the membership test.",
                          flag="--holdout")
    folds: int = option(5, help="Cross-validation folds of the fused membership classifier.", cli=False)
    permutations: int = option(20000, help="Permutation draws of the membership test.", cli=False)
    downstream: dict[str, Any] = option(help="The downstream model's training settings.", cli=False,
                                        default_factory=dict)

    def check(self) -> None:
        c = Checker(self, "attack.membership.", flags=True)
        c.paths("public", "holdout")
        c.at_least("folds", 2)
        c.at_least("permutations", 1)
        if bool(self.public) != bool(self.holdout):
            raise PfdError("the membership test needs both --public DATA and --holdout SPEC (or neither)")


@dataclass
class MembershipResult(CheckResult):
    """The membership report (``report.json``'s ``membership``)."""

    report: dict[str, Any] = field(default_factory=dict)

    def sections(self) -> dict[str, Any]:
        return {"membership": self.report}

    def rows(self) -> list[AuditRow]:
        row = membership_row(self.report) if self.report else None
        return [row] if row is not None else []

    def plots(self, folder: Path) -> dict[str, str]:
        if not self.report:
            return {}
        from pfd.attacks.plots import plot_densities, plot_roc

        plot_roc(self.report, folder / "membership_roc.png", title="Release membership: ROC (log-log)")
        plot_densities(self.report, folder / "membership_density.png", title="Release membership: member vs non-member")
        return {"membership_roc": "membership_roc.png", "membership_density": "membership_density.png"}

    def markdown(self) -> list[str]:
        mem = self.report
        if not mem:
            return []
        c = mem["counts"]
        ds = mem.get("downstream", {})
        out = ["", "## Membership of the release", "",
               f"A downstream model ({ds.get('backbone')} ×{ds.get('width')}, {ds.get('size')} px) trained on "
               f"`{ds.get('data', ['?'])[0]}` + the release{' (reused)' if mem.get('downstream_reused') else ''}; members: "
               f"the {c['members']} private identities, non-members: {c['nonmembers']} identities of "
               f"`{mem.get('nonmembers', '?')}` (same domain, or the AUC also measures domain shift). Chance AUC = 0.5."]
        v = mem.get("verdict")
        if v:
            out += ["", f"**Verdict** (the test): the largest a-priori AUC (higher = member) over the four statistics"
                    f"{' and the fused MLP' if 'fusion' in v['scores'] else ''} is {v['auc']:.3f} "
                    f"({_NAMES.get(v['statistic'], v['statistic'])}); permuting member/non-member labels "
                    f"{v['permutations']} times, the null exceeds {v['null95']:.3f} 5% of the time: p = {v['p']:.3g}, "
                    f"**{'LEAKS' if v['leaks'] else 'no evidence of a leak'}**."]
            if v.get("reversed"):
                out.append(f"Members are *looser* than non-members for {', '.join(_NAMES[n] for n in v['reversed'])}: "
                           "not membership leakage in the a-priori direction; often non-members from another domain.")
        out += ["", "Description (not a test): the oriented AUC max(A, 1 − A), chosen after looking at the data, with a "
                "Hanley-McNeil interval; TPR at 1% / 0.1% FPR in that direction.", "",
                "| statistic | AUC a priori | oriented AUC | 95% CI (oriented) | members score | TPR@1%FPR | TPR@0.1%FPR |",
                "|---|---|---|---|---|---|---|"]
        from pfd.attacks.membership.statistics import STATISTICS

        for name in STATISTICS:
            s = mem["statistics"][name]
            t, t01 = s["tpr_at_1pct_fpr"], s["tpr_at_0.1pct_fpr"]
            out.append(f"| {_NAMES[name]} | {s['auc_a_priori']:.3f} | {s['auc']:.3f} | "
                       f"[{s['auc_ci95'][0]:.3f}, {s['auc_ci95'][1]:.3f}] | {s['direction']} | "
                       f"{t['tpr']:.3f}{'' if t['resolvable'] else '*'} | {t01['tpr']:.3f}{'' if t01['resolvable'] else '*'} |")
        fusion = mem.get("fusion", {})
        if "auc_mean" in fusion:
            out.append(f"\nFused MLP: {fusion['auc_mean']:.3f} ± {fusion['auc_std']:.3f} over {fusion['folds']} folds "
                       f"(best single statistic on the same folds: {fusion['best_single']['statistic']} "
                       f"{fusion['best_single']['auc_mean']:.3f}).")
        elif "skipped" in fusion:
            out.append(f"\nFused MLP skipped: {fusion['skipped']}.")
        return out


@register_check
class MembershipAttack(Check):
    """Membership of the release's people in a model trained on it (the geometric MIA; Öztürk & Marcel 2026)."""

    name, title, config = "membership", "Membership of the release", MembershipConfig
    when_skipped, empty_sections = "not audited", {"membership": {}}

    @classmethod
    def page(cls, data: Mapping[str, Any]) -> list[str]:
        from pfd.attacks.scorecard.html import membership_roc

        roc = membership_roc(data.get("membership") or {})
        return ["<h2>Membership</h2>", roc] if roc else []
    flag_prefix = "mia"

    def applicable(self, inputs: AuditInputs) -> str | None:
        if not self.cfg.public:
            return "no --public DATA --holdout SPEC given (needed to train and audit a downstream model)"
        return None

    def run(self, inputs: AuditInputs) -> MembershipResult:
        from pfd.attacks.membership.audit import membership_audit, resolve_head
        from pfd.attacks.membership.downstream import downstream_config, train_downstream
        from pfd.attackers.loading import load_attacker
        from pfd.release.disjoint import check_disjoint_sets

        cfg, c, sets = inputs.cfg, self.cfg, inputs.sets
        # Non-members that are members make the test meaningless: refused by content before any training.
        # The sets are the audit's (pfd card has opened and checked them already: no second decoding).
        first = sets.dataset(c.holdout, inputs.public.size)
        check_disjoint_sets(first, sets.private(inputs.public.size), a_flag=f"--holdout {c.holdout}",
                            b_flag=f"the private set {inputs.private_spec}",
                            fix="the held-out people are the non-members of the membership test: pass people "
                                "the release was not distilled from")
        dcfg = downstream_config(c.downstream, public=c.public, release=inputs.state.release,
                                 image_size=inputs.state.image_size or inputs.public.size,
                                 out=Path(cfg.report) / "downstream")
        n_train = len(sets.dataset(c.public, dcfg.size)) + len(inputs.state.files)
        if dcfg.batch_size > n_train:  # the trainer's message names --batch-size, which sizes other models (issue 34)
            raise PfdError(f"the membership test's downstream model trains on {n_train} images (--public "
                           f"{c.public} + the release), fewer than its batch of {dcfg.batch_size}; set batch_size = "
                           f"{n_train} or less under [{outer_key('attack.membership.downstream')}] in a --recipe, or "
                           "pass more public data")
        with inputs.clock.stage("downstream"):
            path, reused = train_downstream(dcfg, progress=inputs.progress)
        model = load_attacker(path, role="downstream", batch_size=cfg.batch_size, flip=cfg.flip, progress=inputs.progress)
        kind, s, m, _ = resolve_head(path, None, None, None)
        holdout = sets.dataset(c.holdout, model.size)
        # The public model saw neither the private nor the held-out people: the reference check of
        # pfd.attacks.membership.reference (a LEAKS verdict on groups that differ before training is inconclusive).
        # Its private gallery is already embedded (linkability), so only the held-out people are new to it.
        ref = inputs.public
        ref_sets = (sets.private(ref.size), sets.dataset(c.holdout, ref.size))
        reference_member_emb = inputs.embeddings(ref)["private"]
        with inputs.clock.stage("membership"):
            rep = membership_audit(model, sets.private(model.size), holdout, head=kind, scale=s, margin=m, folds=c.folds,
                                   seed=cfg.seed, permutations=c.permutations, reference=ref, reference_sets=ref_sets,
                                   reference_member_emb=reference_member_emb)
        rep.update(members=inputs.private_spec, nonmembers=c.holdout, downstream=config_to_dict(dcfg),
                   downstream_reused=reused)
        return MembershipResult(rep)
