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
* **unresolved**: the audit's *design* is too small to say anything (below).

Two questions are answered apart (verdict version 3, issue 57). Whether the release **leaks** is
decided on the realised figures, as above. What the audit **rules out** is a property of its design,
not of which class happened to hit: for every rate on the proxies (``rule_out``), the 95 % upper end
of the share of the ``people`` (source identities) an attacker names when the attack is exactly at
chance and each person's K proxies move as one (the tightest classes possible, so the statement
holds whatever the class tightness in any model): :func:`design_share`, ``CP⁺(chance · N; N)``. It
is about 5.6/N for a balanced gallery (chance 1/N): 21 % of 24 people, 7.5 % of 72, 0.56 % of 1,000.
A design is *resolved* when it rules out :data:`BOUND` of the people or :data:`RULE_OUT` × chance
(the multiple binds below about 17 people, the share above); otherwise every such row is
"unresolved" and the advice is more identities (:func:`people_needed`), never more proxies per
identity. Version 2 required each *realised* 95 % interval to exclude 5× chance: with tight classes
one class in N hits at chance and puts the upper end at about 5.6× chance whatever N is, so it
refused 70-80 % of releases at chance (docs/distill.md, "Tight classes, and why the verdict changed").

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
from typing import Mapping, Sequence, TypedDict

from pfd.audit.intervals import clopper_pearson
from pfd.audit.rows import AuditRow
from pfd.errors import PfdError

__all__ = ["LEVEL", "RULE_OUT", "BOUND", "VERSION", "REFUSING", "Verdict", "VerdictSummary", "VerdictRecord", "decide",
           "failure", "design_share", "people_needed"]

#: The family-wise level: a release at chance is refused through LEAKS in at most this share of audits.
LEVEL = 0.01
#: A design is resolved when, at chance, it rules out this multiple of chance ... (:func:`design_share`)
RULE_OUT = 5.0
#: ... or this share of the people being named by an attacker.
BOUND = 0.3
#: The ``family`` of a row that refuses publication, in the order :attr:`Verdict.refusals` lists them
#: ("too few to test" rows, family ``untestable``, refuse nothing).
REFUSING: tuple[str, ...] = ("failed", "leaks", "unresolved")
#: The audit's version, recorded in the manifest of every release it passed (2: class-level linking added;
#: 3: what the audit rules out is a property of its design, not of the realised intervals).
VERSION = 3


class VerdictSummary(TypedDict):
    """:meth:`Verdict.summary`: the aggregates a release's manifest records (its ``audit``; the keys
    :data:`pfd.release.format.AUDIT_KEYS` allows). ``None`` stands for a figure that is not finite."""

    version: int
    level: float
    rule_out: float
    bound: float
    figures: int
    checks: int
    publishable: bool
    largest_rate_over_chance: float | None
    rules_out_share: float | None
    rules_out_multiple: float | None
    people: int
    failed: int


class VerdictRecord(VerdictSummary):
    """:meth:`Verdict.as_dict`: the summary, the verdict's text, the per-figure level and the labels of
    the rows that refuse, the skipped checks (and why) and the rows too few to test."""

    text: str
    per_figure: float
    leaks: list[str]
    unresolved: list[str]
    failed_checks: list[str]
    skipped: dict[str, str]
    untestable: list[str]
    not_audited: dict[str, str]


@dataclass
class Verdict:
    """The audit's decision.

    Attributes:
        publishable: Whether every gating row passed.
        level: The family-wise level.
        rule_out: The multiple of chance a resolved design rules out.
        bound: The share of the people a resolved design rules out (either suffices).
        figures: ``m``: gating figures tested family-wise (rates and tests).
        checks: Gating pass/fail checks.
        leaks: Rows that leak at the family-wise level.
        unresolved: Rows whose design cannot rule out ``bound`` of the people nor ``rule_out`` × chance.
        failed: Pass/fail checks that failed.
        largest: The largest rate / chance over the gating rate rows (``nan`` without one).
        design_share: What the design rules out: the largest :func:`design_share` over the proxy
            rates (``nan`` without one): no attacker names the source of more than this share of ...
        people: ... this many people (the source identities of that row).
        design_multiple: ``design_share`` over that row's chance.
        skipped: Checks that did not run and why.
    """

    publishable: bool
    level: float
    rule_out: float
    figures: int
    checks: int
    leaks: list[AuditRow] = field(default_factory=list)
    unresolved: list[AuditRow] = field(default_factory=list)
    failed: list[AuditRow] = field(default_factory=list)
    largest: float = float("nan")
    bound: float = BOUND
    design_share: float = float("nan")
    design_multiple: float = float("nan")
    people: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    untestable: list[AuditRow] = field(default_factory=list)
    not_audited: dict[str, str] = field(default_factory=dict)

    @property
    def per_figure(self) -> float:
        """Each figure's level, ``level / m``."""
        return self.level / max(self.figures, 1)

    @property
    def refusals(self) -> list[AuditRow]:
        """Every row that refuses publication, failed checks first."""
        return [*self.failed, *self.leaks, *self.unresolved]

    @property
    def text(self) -> str:
        """One line: the verdict and its evidence."""
        head = (f"family-wise {100 * self.level:g} % over {self.figures} figures and {self.checks} checks")
        if self.publishable:
            return f"publishable: no figure leaks ({head})" + self._rules_out() + self._not_run()
        parts = [failure(r, self) for r in self.refusals]
        return f"not publishable: {len(self.refusals)} of {self.figures + self.checks} fail ({head}); " + "; ".join(parts[:4]) + (
            f"; and {len(parts) - 4} more" if len(parts) > 4 else "") + self._rules_out() + self._not_run()

    def _rules_out(self) -> str:
        """What the design rules out, in people and in multiples of chance (empty without a proxy rate)."""
        if not math.isfinite(self.design_share):
            return ""
        return (f"; by design the audit rules out that any attacker names the source of more than "
                f"{100 * self.design_share:.1f} % of the {self.people} people ({self.design_multiple:.1f}× chance)")

    def _not_run(self) -> str:
        # Said in the verdict itself, refused or not (issue 34: only the page's foot said it).
        out = f"; {len(self.skipped)} check(s) not run ({', '.join(sorted(self.skipped))})" if self.skipped else ""
        if self.not_audited:  # membership without a holdout: the publisher should know it was not measured
            out += f"; not audited: {', '.join(sorted(self.not_audited))} (their inputs were not given)"
        if self.untestable:
            out += (f"; {len(self.untestable)} test(s) too few identities to test ("
                    f"{', '.join(r.label for r in self.untestable[:3])}{', ...' if len(self.untestable) > 3 else ''})")
        return out

    def summary(self) -> VerdictSummary:
        """Aggregates only (nothing about any person): what a release's manifest records."""
        return VerdictSummary(version=VERSION, level=self.level, rule_out=self.rule_out, bound=self.bound,
                              figures=self.figures, checks=self.checks, publishable=self.publishable,
                              largest_rate_over_chance=_finite(self.largest), rules_out_share=_finite(self.design_share),
                              rules_out_multiple=_finite(self.design_multiple), people=int(self.people),
                              failed=len(self.refusals))

    def as_dict(self) -> VerdictRecord:
        """JSON-ready: the summary, the text, and the labels of the rows that refuse."""
        return VerdictRecord(**self.summary(), text=self.text, per_figure=self.per_figure,
                             leaks=[r.label for r in self.leaks], unresolved=[r.label for r in self.unresolved],
                             failed_checks=[r.label for r in self.failed], skipped=dict(self.skipped),
                             untestable=[r.label for r in self.untestable], not_audited=dict(self.not_audited))


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def failure(row: AuditRow, v: Verdict | None = None) -> str:
    """Why one row refuses publication (one phrase)."""
    if row.kind == "check":
        return f"{row.label} failed: {row.detail or ''}".rstrip(": ")
    if row.family == "leaks" or (v is not None and any(r is row for r in v.leaks)):
        if row.p is not None:
            at = f" (at most {v.per_figure:.2g} needed)" if v is not None else ""
            return f"{row.label} leaks: p = {row.p:.2g}{at}"
        return f"{row.label} leaks: {_pct(row.value)} linked, chance {_pct(row.chance)}"
    share, people = float(row.design_share or 0.0), int(row.people or 0)
    need = people_needed(_or(row.bound_required, BOUND), _or(row.rule_out_multiple, RULE_OUT))
    return (f"{row.label} cannot, by design, rule out that an attacker names {_pct(share)} of the {people} people "
            f"({share / row.chance:.1f}× chance {_pct(row.chance)}): audit at least {need} private identities")


def _or(x: float | None, default: float) -> float:
    return default if x is None else float(x)


def _pct(x: float) -> str:
    return f"{100 * float(x):.1f}%"


def _rate_leaks(row: AuditRow, a: float) -> bool:
    n = float(row.n_eff or row.n or 0)
    if n <= 0:
        return row.verdict == "LEAKS"
    lo, _ = clopper_pearson(min(row.value * n, n), n, alpha=a)
    return lo > row.chance


def design_share(chance: float, people: int, *, alpha: float = 0.05) -> float:
    """What an audit at chance can rule out: the share of ``people`` an attacker might name (module docstring).

    The exact (Clopper-Pearson) upper end at confidence ``1 − alpha`` of a share of ``people``
    trials with ``chance · people`` successes: the audit's design when each person's proxies succeed
    or fail together. Deterministic for a given design.

    Args:
        chance: The attack's chance level.
        people: Source identities audited (N).
        alpha: 1 − confidence.

    Returns:
        The share in (0, 1].
    """
    n = max(int(people), 1)
    return clopper_pearson(min(float(chance) * n, n), n, alpha=alpha)[1]


def _resolved(share: float, chance: float, *, rule_out: float, bound: float) -> bool:
    return share <= bound or (rule_out > 0 and share <= rule_out * chance)


def people_needed(bound: float = BOUND, rule_out: float = RULE_OUT) -> int:
    """The fewest people of a balanced gallery (chance 1/N) whose design from there on is resolved.

    Args:
        bound: :data:`BOUND`.
        rule_out: :data:`RULE_OUT`.

    Returns:
        N (capped at 10^7).
    """
    last_bad = 0
    for n in range(2, 4096):  # the multiple binds at small N and the share at large N: scan the gap
        if not _resolved(design_share(1.0 / n, n), 1.0 / n, rule_out=rule_out, bound=bound):
            last_bad = n
    if last_bad < 4095:
        return last_bad + 1
    lo, hi = 4095, 10**7  # the share alone from here: design_share(1/N, N) falls with N
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if design_share(1.0 / mid, mid) > bound else (lo, mid)
    return hi


def decide(rows: Sequence[AuditRow], *, level: float = LEVEL, rule_out: float = RULE_OUT, bound: float = BOUND,
           skipped: Mapping[str, str] | None = None, not_audited: Mapping[str, str] | None = None) -> Verdict:
    """The audit's one verdict over its rows (module docstring), and each row's verdict at that level.

    Each gating row gets ``family`` (``"passed"``, ``"failed"``, ``"leaks"``, ``"unresolved"`` or
    ``"untestable"``) and its ``verdict`` rewritten to the family-wise one (the nominal 95 % verdict stays in
    ``verdict_95``), so no table says LEAKS where the verdict says publishable.

    Args:
        rows: The audit's rows (modified in place as above).
        level: Family-wise level.
        rule_out: Multiple of chance a resolved design rules out (0: only ``bound`` counts).
        bound: Share of the people a resolved design rules out (1: every design is resolved).
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
    gating = [r for r in rows if r.gates and r.verdict != "inconclusive"]
    checks = [r for r in gating if r.kind == "check"]
    figures = [r for r in gating if r.kind != "check"]
    # A test the data cannot push to the level of the whole family leaves it (issue 34: 2 identities).
    untestable = [r for r in figures if r.p is not None and float(r.data_floor or 0) > level / max(len(figures), 1)]
    for r in untestable:
        r.verdict_95 = r.verdict if r.verdict_95 is None else r.verdict_95
        r.family, r.verdict = "untestable", "too few to test"
    figures = [r for r in figures if r.family != "untestable"]
    m = max(len(figures), 1)
    a = level / m
    for r in figures:
        if r.p is not None and r.p_floor is not None and float(r.p_floor) > a:
            need = math.ceil(1 / a)
            raise PfdError(f"{r.label}: its test cannot reach the audit's per-figure level {a:.2g} ({level:g} over {m} "
                           f"figures) with {r.setting or 'these settings'} = {round(1 / float(r.p_floor)) - 1}; "
                           f"use at least {need}")
    v = Verdict(publishable=True, level=level, rule_out=rule_out, bound=bound, figures=len(figures), checks=len(checks),
                skipped=dict(skipped or {}), untestable=untestable, not_audited=dict(not_audited or {}))
    for r in checks:
        r.family = "passed" if r.passed else "failed"
        r.verdict = "passed" if r.passed else "FAILED"
        if not r.passed:
            v.failed.append(r)
    worst: AuditRow | None = None
    for r in figures:
        r.verdict_95 = r.verdict if r.verdict_95 is None else r.verdict_95
        leak = float(r.p) <= a if r.p is not None else (
            _rate_leaks(r, a) if r.kind == "rate" else r.verdict_95 == "LEAKS")
        if r.kind == "rate" and r.rule_out and r.chance > 0:
            # The design's statement: the people behind the row (a row without them counts its trials).
            r.people = int(r.people or r.n or 1)
            r.design_share = design_share(r.chance, r.people)
            if worst is None or r.design_share > (worst.design_share or 0.0):
                worst = r
        if leak:
            r.family, r.verdict = "leaks", "LEAKS"
            v.leaks.append(r)
            continue
        if r.design_share is not None and not _resolved(r.design_share, r.chance, rule_out=rule_out, bound=bound):
            r.family, r.verdict = "unresolved", "unresolved"
            r.rule_out_multiple, r.bound_required = rule_out, bound
            v.unresolved.append(r)
            continue
        r.family = "passed"
        if r.verdict == "LEAKS":  # at its own 95 % only: not a leak at the audit's level
            r.verdict = "≈ chance"
    rates = [r for r in figures if r.kind == "rate" and r.chance > 0]
    if rates:
        v.largest = max(r.value / r.chance for r in rates)
    if worst is not None:
        v.design_share, v.people = float(worst.design_share or 0.0), int(worst.people or 0)
        v.design_multiple = v.design_share / worst.chance
    v.publishable = not (v.failed or v.leaks or v.unresolved)
    return v
