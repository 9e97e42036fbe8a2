"""``attributes``: attribute recovery from a release, as a registered scorecard attack (PFD paper, Tab. 4).

A probe on the public model's embeddings, fitted on an auxiliary labelled set the attacker owns
(:func:`pfd.attacks.attributes.probe.probe_attribute_recovery`), labels every proxy and private
image; each proxy's label is compared with its source's majority label. Rows: balanced accuracy
and Macro-F1 with their permutation chance, cluster-bootstrap interval and p-value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pfd.audit.contract import Check, AuditInputs, CheckResult, option, register_check, summary_row
from pfd.audit.rows import AuditRow
from pfd.config.checks import Checker

# The probe (scikit-learn, torch) is imported where it runs: the CLI reads this module's config at start-up.

__all__ = ["AttributesConfig", "AttributesAttack", "AttributesResult"]


@dataclass
class AttributesConfig:
    """``attributes``: attribute recovery.

    Attributes:
        enabled: Run it.
        data: The attacker's labelled auxiliary set (an identity folder with ``attributes.csv``, or a
            synthetic spec); empty: the synthetic ``public`` split for a synthetic private set, else skip.
        permutations: Permutation draws of the chance levels.
    """

    enabled: bool = option(True, help="Run attribute recovery (default on).", flag="--attributes")
    data: str = option("", help="Labelled auxiliary set (attributes.csv) for the attribute probe.", flag="--attr-data")
    permutations: int = option(20000, help="Permutation draws of the attribute chance levels.", cli=False)

    def check(self) -> None:
        c = Checker(self, "attack.attributes.", flags=True, flag_names={"data": "--attr-data"})
        c.paths("data")
        c.at_least("permutations", 1)


@dataclass
class AttributesResult(CheckResult):
    """Per attribute: accuracy, Macro-F1, their chance, interval and p-value (``report.json``'s ``attributes``)."""

    aux: str
    per_attribute: dict[str, Any]

    def sections(self) -> dict[str, Any]:
        return {"attributes": {"aux": self.aux, "per_attribute": self.per_attribute} if self.per_attribute else {}}

    def rows(self) -> list[AuditRow]:
        out = []
        for name, a in self.per_attribute.items():
            # A permutation p-value is at least 1 / (draws + 1): the verdict refuses too few to reach its level.
            res = {"p_floor": 1.0 / (int(a["permutations"]) + 1) if "permutations" in a else None,
                   "setting": "[attack.attributes] permutations"}
            out.append(summary_row(f"Attribute {name}: balanced acc.", "public probe", a["balanced_accuracy"],
                                   a["chance_balanced_accuracy"], a["ci95_balanced_accuracy"], "score",
                                   test_p=a["p_balanced_accuracy"], **res))
            out.append(summary_row(f"Attribute {name}: Macro-F1", "public probe", a["macro_f1"], a["chance_macro_f1"],
                                   a["ci95_macro_f1"], "score", test_p=a["p_macro_f1"], **res))
        return out

    def markdown(self) -> list[str]:
        if not self.per_attribute:
            return []
        out = ["", "## Attribute recovery", "",
               f"Probe: logistic regression on public-model embeddings, fitted on `{self.aux}` (the attacker's "
               "own labelled data). A proxy's label is compared with the majority label of its source's private "
               "images. Chance = mean of the permutation null; p = one-sided permutation p-value.", "",
               "| attribute | classes | balanced acc. | chance | p | Macro-F1 | chance | p | probe train acc. |",
               "|---|---|---|---|---|---|---|---|---|"]
        for name, a in self.per_attribute.items():
            out.append(f"| {name} | {len(a['observed_classes'])}/{a['num_classes']} | {100 * a['balanced_accuracy']:.1f}% | "
                       f"{100 * a['chance_balanced_accuracy']:.1f}% | {a['p_balanced_accuracy']:.3g} | "
                       f"{100 * a['macro_f1']:.1f}% | {100 * a['chance_macro_f1']:.1f}% | {a['p_macro_f1']:.3g} | "
                       f"{100 * a['probe_train_accuracy']:.1f}% |")
        return out


@register_check
class AttributesAttack(Check):
    """Attribute recovery: do the proxies carry their sources' attributes to a probe the attacker fits?"""

    name, title, config = "attributes", "Attribute recovery", AttributesConfig
    when_skipped, empty_sections = "not audited", {"attributes": {}}
    flag_prefix = "attr"

    def applicable(self, inputs: AuditInputs) -> str | None:
        from pfd.attacks.attributes.probe import default_aux_spec

        if not self.cfg.enabled:
            return "disabled (--no-attributes)"
        if not (self.cfg.data or default_aux_spec(inputs.sets.private(inputs.public.size))):
            return "no labelled auxiliary set for the attribute probe; pass --attr-data SPEC (an identity folder with attributes.csv)"
        return None

    def run(self, inputs: AuditInputs) -> AttributesResult:
        from pfd.attacks.attributes.probe import default_aux_spec, probe_attribute_recovery
        from pfd.data.sources import open_faces

        public = inputs.public
        aux_spec = self.cfg.data or default_aux_spec(inputs.sets.private(public.size))
        with inputs.clock.stage("load"):
            aux = open_faces(aux_spec, size=public.size, skip_bad=inputs.cfg.skip_bad)
        if not aux.attributes:
            inputs.skipped[self.name] = f"{aux_spec} has no attributes (no attributes.csv)"
            return AttributesResult(aux_spec, {})
        with inputs.clock.stage("embed"):
            aux_emb = public.embed(aux)
        e = inputs.embeddings(public)
        with inputs.clock.stage("attributes"):
            per = probe_attribute_recovery(aux_emb, aux, e["proxies"], inputs.source, e["private"], inputs.labels,
                                           permutations=self.cfg.permutations, seed=inputs.cfg.seed)
        return AttributesResult(aux_spec, per)
