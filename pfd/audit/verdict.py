"""The one verdict of an audit: may this release be published?

Every figure of the audit is a row (:func:`pfd.audit.contract.summary_row`) produced by a
registered check (:data:`pfd.audit.contract.CHECKS`). :func:`decide` turns the rows into one
decision at one documented family-wise level, and ``pfd distill``'s gate, ``pfd attack``,
``pfd card`` and the benchmark all call it, so pfd never publishes what its own card calls a leak.

A row that gates publication (``gates``, true unless its check says otherwise) fails it in one of
three ways:

* **failed**: a pass/fail check (``kind = "check"``: the release's integrity, private copies,
  OGP's margin, the judge's competence) did not pass;
* **leaks**: with ``m`` gating figures, a figure leaks at family-wise level :data:`LEVEL` when
  each is tested at ``LEVEL / m`` (Bonferroni, valid whatever the dependence between figures): a
  rate whose exact (Clopper-Pearson) interval at the effective sample size ``n_eff`` and
  confidence ``1 − LEVEL / m`` lies above chance; a test whose p-value is at most ``LEVEL / m``.
  Under the null (no figure has any signal) a release is refused this way in at most
  :data:`LEVEL` of audits (tested by simulation, ``tests/audit/test_verdict.py``);
* **unresolved**: a rate on the proxies (``rule_out``) whose 95 % interval cannot exclude
  :data:`RULE_OUT` × chance: the audit is too small to call the release unlinkable. A plain
  attack that fails only this because of a *hub* (one private identity the nearest match of most
  proxies, ``hub``) takes the verdict of its hubness-corrected partner (``partner``), which ranks
  without the hub. LEAKS is never deferred.

A test that cannot reach ``LEVEL / m`` (a permutation test with too few draws: ``p_floor``) is a
setting error, not a pass: :func:`decide` refuses it, naming the setting and the smallest value
that works. One that no number of draws could bring there, because the data admit too few
arrangements (``data_floor``: 2 identities have 2), is "too few to test": it neither passes nor
refuses, leaves the family (so it does not split the level), and the verdict's text names it; the
rates decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pfd.errors import PfdError

__all__ = ["LEVEL", "RULE_OUT", "VERSION", "REFUSING", "Verdict", "decide", "label", "failure"]

#: The family-wise level: a release at chance is refused through LEAKS in at most this share of audits.
LEVEL = 0.01
#: A rate on the proxies must have a 95 % interval that excludes this multiple of chance.
RULE_OUT = 5.0
#: The ``family`` of a row that refuses publication, in the order :attr:`Verdict.refusals` lists them
#: ("too few to test" rows, family ``untestable``, refuse nothing).
REFUSING: tuple[str, ...] = ("failed", "leaks", "unresolved")
#: The audit's version, recorded in the manifest of every release it passed (2: class-level linking added).
VERSION = 2


def label(row: Mapping[str, Any]) -> str:
    """``"<attack> by <attacker>"`` (or the check's name)."""
    who = row.get("attacker")
    return f"{row['attack']} by {who}" if who and who != "-" else str(row["attack"])


@dataclass
class Verdict:
    """The audit's decision.

    Attributes:
        publishable: Whether every gating row passed.
        level: The family-wise level.
        rule_out: The multiple of chance each proxy rate must exclude.
        figures: ``m``: gating figures tested family-wise (rates and tests).
        checks: Gating pass/fail checks.
        leaks: Rows that leak at the family-wise level.
        unresolved: Rows whose interval cannot rule out ``rule_out`` × chance.
        failed: Pass/fail checks that failed.
        largest: The largest rate / chance over the gating rate rows (``nan`` without one).
        bound: The largest 95 % upper end / chance over them: the linkage no figure excludes.
        skipped: Checks that did not run and why.
    """

    publishable: bool
    level: float
    rule_out: float
    figures: int
    checks: int
    leaks: list[dict[str, Any]] = field(default_factory=list)
    unresolved: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    largest: float = float("nan")
    bound: float = float("nan")
    skipped: dict[str, str] = field(default_factory=dict)
    untestable: list[dict[str, Any]] = field(default_factory=list)
    not_audited: dict[str, str] = field(default_factory=dict)

    @property
    def per_figure(self) -> float:
        """Each figure's level, ``level / m``."""
        return self.level / max(self.figures, 1)

    @property
    def refusals(self) -> list[dict[str, Any]]:
        """Every row that refuses publication, failed checks first."""
        return [*self.failed, *self.leaks, *self.unresolved]

    @property
    def text(self) -> str:
        """One line: the verdict and its evidence."""
        head = (f"family-wise {100 * self.level:g} % over {self.figures} figures and {self.checks} checks")
        if self.publishable:
            out = f"publishable: no figure leaks ({head})"
            if math.isfinite(self.bound):
                out += f", every linkage rate rules out {self.bound:.1f}× chance"
            return out + self._not_run()
        parts = [failure(r, self) for r in self.refusals]
        return f"not publishable: {len(self.refusals)} of {self.figures + self.checks} fail ({head}); " + "; ".join(parts[:4]) + (
            f"; and {len(parts) - 4} more" if len(parts) > 4 else "") + self._not_run()

    def _not_run(self) -> str:
        # Said in the verdict itself, refused or not (issue 34: only the page's foot said it).
        out = f"; {len(self.skipped)} check(s) not run ({', '.join(sorted(self.skipped))})" if self.skipped else ""
        if self.not_audited:  # membership without a holdout: the publisher should know it was not measured
            out += f"; not audited: {', '.join(sorted(self.not_audited))} (their inputs were not given)"
        if self.untestable:
            out += (f"; {len(self.untestable)} test(s) too few identities to test ("
                    f"{', '.join(label(r) for r in self.untestable[:3])}{', ...' if len(self.untestable) > 3 else ''})")
        return out

    def summary(self) -> dict[str, Any]:
        """Aggregates only (nothing about any person): what a release's manifest records."""
        return {"version": VERSION, "level": self.level, "rule_out": self.rule_out, "figures": self.figures,
                "checks": self.checks, "publishable": self.publishable,
                "largest_rate_over_chance": _finite(self.largest), "bound_over_chance": _finite(self.bound),
                "failed": len(self.refusals)}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the summary, the text, and the labels of the rows that refuse."""
        return {**self.summary(), "text": self.text, "per_figure": self.per_figure,
                "leaks": [label(r) for r in self.leaks], "unresolved": [label(r) for r in self.unresolved],
                "failed_checks": [label(r) for r in self.failed], "skipped": dict(self.skipped),
                "untestable": [label(r) for r in self.untestable], "not_audited": dict(self.not_audited)}


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def failure(row: Mapping[str, Any], v: Verdict | None = None) -> str:
    """Why one row refuses publication (one phrase)."""
    if row.get("kind") == "check":
        return f"{label(row)} failed: {row.get('detail', '')}".rstrip(": ")
    if row.get("family") == "leaks" or (v is not None and row in v.leaks):
        if row.get("p") is not None:
            at = f" (at most {v.per_figure:.2g} needed)" if v is not None else ""
            return f"{label(row)} leaks: p = {row['p']:.2g}{at}"
        return f"{label(row)} leaks: {_pct(row['value'])} linked, chance {_pct(row['chance'])}"
    hi = row["ci95"][1]
    return (f"{label(row)} cannot rule out {_pct(hi)} ({hi / row['chance']:.1f}× chance {_pct(row['chance'])}, "
            f"more than {row.get('rule_out_multiple', RULE_OUT):g}×)")


def _pct(x: float) -> str:
    return f"{100 * float(x):.1f}%"


def _rate_leaks(row: Mapping[str, Any], a: float) -> bool:
    from pfd.attacks.metrics import clopper_pearson

    n = float(row.get("n_eff") or row.get("n") or 0)
    if n <= 0:
        return row.get("verdict") == "LEAKS"
    lo, _ = clopper_pearson(min(float(row["value"]) * n, n), n, alpha=a)
    return lo > float(row["chance"])


def _unresolved(row: Mapping[str, Any], rule_out: float) -> bool:
    ci, chance = row.get("ci95"), float(row.get("chance") or 0)
    return bool(rule_out) and bool(row.get("rule_out")) and ci is not None and chance > 0 and ci[1] / chance > rule_out


def decide(rows: Sequence[dict[str, Any]], *, level: float = LEVEL, rule_out: float = RULE_OUT,
           skipped: Mapping[str, str] | None = None, not_audited: Mapping[str, str] | None = None) -> Verdict:
    """The audit's one verdict over its rows (module docstring), and each row's verdict at that level.

    Each gating row gets ``family`` (``"passed"``, ``"failed"``, ``"leaks"`` or ``"unresolved"``)
    and its ``verdict`` rewritten to the family-wise one (the nominal 95 % verdict stays in
    ``verdict_95``), so no table says LEAKS where the verdict says publishable.

    Args:
        rows: The audit's rows (modified in place as above).
        level: Family-wise level.
        rule_out: Multiple of chance each proxy rate's 95 % interval must exclude (0: none).
        skipped: Checks that did not run, and why.
        not_audited: Attacks whose inputs were not given (membership without a holdout, attributes
            without labels): they refuse nothing, and the verdict's text names them.

    Returns:
        The :class:`Verdict`.

    Raises:
        PfdError: A gating test whose smallest possible p-value (``p_floor``) exceeds ``level / m``:
            it could never flag; the message names its setting and the value that works.
    """
    if not 0 < level < 1:
        raise PfdError(f"the audit's family-wise level must lie in (0, 1), got {level}")
    gating = [r for r in rows if r.get("gates", True) and r.get("verdict") != "inconclusive"]
    checks = [r for r in gating if r.get("kind") == "check"]
    figures = [r for r in gating if r.get("kind") != "check"]
    # A test the data cannot push to the level of the whole family leaves it (issue 34: 2 identities).
    untestable = [r for r in figures if r.get("p") is not None and float(r.get("data_floor") or 0) > level / max(len(figures), 1)]
    for r in untestable:
        r.setdefault("verdict_95", r.get("verdict"))
        r["family"], r["verdict"] = "untestable", "too few to test"
    figures = [r for r in figures if r.get("family") != "untestable"]
    m = max(len(figures), 1)
    a = level / m
    for r in figures:
        floor = r.get("p_floor")
        if r.get("p") is not None and floor is not None and float(floor) > a:
            need = math.ceil(1 / a)
            raise PfdError(f"{label(r)}: its test cannot reach the audit's per-figure level {a:.2g} ({level:g} over {m} "
                           f"figures) with {r.get('setting', 'these settings')} = {round(1 / float(floor)) - 1}; "
                           f"use at least {need}")
    v = Verdict(publishable=True, level=level, rule_out=rule_out, figures=len(figures), checks=len(checks),
                skipped=dict(skipped or {}), untestable=untestable, not_audited=dict(not_audited or {}))
    by_label = {label(r): r for r in figures}
    for r in checks:
        r["family"] = "passed" if r.get("passed") else "failed"
        r["verdict"] = "passed" if r.get("passed") else "FAILED"
        if not r.get("passed"):
            v.failed.append(r)
    for r in figures:
        r.setdefault("verdict_95", r.get("verdict"))
        leak = float(r["p"]) <= a if r.get("p") is not None else (
            _rate_leaks(r, a) if r.get("kind") == "rate" else r.get("verdict_95") == "LEAKS")
        if leak:
            r["family"], r["verdict"] = "leaks", "LEAKS"
            v.leaks.append(r)
            continue
        if _unresolved(r, rule_out):
            partner = by_label.get(f"{r['partner']} by {r.get('attacker')}") if r.get("partner") else None
            if r.get("hub") and partner is not None and not _unresolved(partner, rule_out):
                r["family"], r["deferred_to"] = "passed", label(partner)
            else:
                r["family"], r["verdict"], r["rule_out_multiple"] = "unresolved", "unresolved", rule_out
                v.unresolved.append(r)
                continue
        else:
            r["family"] = "passed"
        if r["verdict"] == "LEAKS":  # at its own 95 % only: not a leak at the audit's level
            r["verdict"] = "≈ chance"
    rates = [r for r in figures if r.get("kind") == "rate" and float(r.get("chance") or 0) > 0]
    if rates:
        v.largest = max(float(r["value"]) / float(r["chance"]) for r in rates)
        # A hub row deferred to its hubness-corrected partner is decided by the partner: its own wider
        # interval is not what the verdict rules out (the 30-person CelebA unit read "5.1x" from one).
        bounded = [float(r["ci95"][1]) / float(r["chance"]) for r in rates
                   if r.get("ci95") and r.get("rule_out") and not r.get("deferred_to")]
        v.bound = max(bounded, default=float("nan"))
    v.publishable = not (v.failed or v.leaks or v.unresolved)
    return v
