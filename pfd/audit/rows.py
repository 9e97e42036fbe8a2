"""One row of the audit: a figure or a pass/fail check, with its chance level, its interval or p-value,
and the verdict the family-wise decision gives it.

Every registered check returns its rows as :class:`AuditRow` (built with
:func:`pfd.audit.contract.summary_row` or :func:`pfd.audit.contract.check_row`);
:func:`pfd.audit.verdict.decide` reads them and fills the decision's fields; the pages, the gate's
summary and the benchmarks read the same fields. At the JSON boundary (``report.json``'s
``summary``, ``card.json``, the benchmarks' records) a row is a flat object:
:meth:`AuditRow.as_dict` writes it and :meth:`AuditRow.from_dict` reads it back, an attack's own
fields (a membership row's TPRs, a hub's name) riding in :attr:`AuditRow.extra`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

__all__ = ["AuditRow", "rows_from_json", "rows_to_json"]


@dataclass
class AuditRow:
    """One row of the audit's summary table.

    Attributes:
        attack: What was measured (``"VisMatch (proxies)"``), or the check's title.
        attacker: Whose model (``public``, ``insider``, ``judge``, an outside model); ``"-"`` for a check.
        value: The figure (a rate, a score, an AUC; a check's number to show).
        chance: Its chance level (0 for a check).
        ci95: Its 95 % interval; ``None`` for a test (its ``p`` decides) and for a check.
        kind: ``"rate"`` (count / n), ``"score"``, ``"auc"`` or ``"check"``.
        verdict: The row's verdict: its own 95 % one until :func:`~pfd.audit.verdict.decide` replaces
            it by the family-wise one (``"LEAKS"``, ``"≈ chance"``, ``"unresolved"``, ``"passed"``,
            ``"FAILED"``, ``"inconclusive"``, ``"too few to test"``).
        p: A test's p-value.
        count: A rate's successes; ``n`` its trials; ``n_eff`` the effective trials (clustered by source).
        people: The source identities behind a rate (the design's N).
        rule_out: Whether the rate states what the audit's design rules out (rates on the proxies).
        gates: Whether the row decides publication.
        check: A pass/fail check's registry name (the remedy table's key).
        passed: Whether a check passed.
        detail: What a check measured or found (one line).
        p_floor: A permutation test's smallest possible p-value; ``data_floor`` the smallest the data
            admit; ``setting`` the setting that sets it (named when it cannot reach the level).
        hub: The private identity nearest to most proxies (VisMatch and Re-ID rows); ``hub_share`` its share.
        null95: A test statistic's 95 % null quantile.
        best: Which of several attacks a best-of row reports.
        family: :func:`~pfd.audit.verdict.decide`'s class: ``"passed"``, ``"failed"``, ``"leaks"``,
            ``"unresolved"`` or ``"untestable"``.
        verdict_95: The row's own 95 % verdict, kept where ``decide`` rewrote :attr:`verdict`.
        design_share: The share of the people the design cannot rule out at chance.
        rule_out_multiple: The multiple of chance an unresolved row had to rule out; ``bound_required``
            the share of the people.
        extra: An attack's own fields, written into the row's JSON as they are.
    """

    attack: str
    attacker: str
    value: float
    chance: float
    ci95: tuple[float, float] | None
    kind: str
    verdict: str
    p: float | None = None
    count: int | None = None
    n: int | None = None
    n_eff: float | None = None
    people: int | None = None
    rule_out: bool = False
    gates: bool = True
    check: str | None = None
    passed: bool | None = None
    detail: str | None = None
    p_floor: float | None = None
    data_floor: float | None = None
    setting: str | None = None
    hub: str | None = None
    hub_share: float | None = None
    null95: float | None = None
    best: str | None = None
    family: str | None = None
    verdict_95: str | None = None
    design_share: float | None = None
    rule_out_multiple: float | None = None
    bound_required: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``"<attack> by <attacker>"`` (a check: its title)."""
        return f"{self.attack} by {self.attacker}" if self.attacker and self.attacker != "-" else self.attack

    def as_dict(self) -> dict[str, Any]:
        """The row's JSON object: the seven fields every row has, every other field that is set
        (``gates`` and ``rule_out`` only when they differ from a plain figure's), then :attr:`extra`."""
        out: dict[str, Any] = {"attack": self.attack, "attacker": self.attacker, "value": self.value,
                               "chance": self.chance, "ci95": None if self.ci95 is None else list(self.ci95),
                               "kind": self.kind, "verdict": self.verdict}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in out or f.name == "extra" or v is None or (f.name == "gates" and v) or (f.name == "rule_out" and not v):
                continue
            out[f.name] = v
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AuditRow:
        """A row read back from its JSON object (:meth:`as_dict`; unknown keys go to :attr:`extra`)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kw = {k: v for k, v in d.items() if k in known}
        if kw.get("ci95") is not None:
            kw["ci95"] = (float(kw["ci95"][0]), float(kw["ci95"][1]))
        return cls(**{"ci95": None, **kw}, extra={k: v for k, v in d.items() if k not in known})


def rows_from_json(rows: Iterable[Mapping[str, Any] | AuditRow] | None) -> list[AuditRow]:
    """Rows as records, from a report's ``summary`` (objects, or rows already typed)."""
    return [r if isinstance(r, AuditRow) else AuditRow.from_dict(r) for r in rows or []]


def rows_to_json(rows: Iterable[AuditRow]) -> list[dict[str, Any]]:
    """Rows as the JSON objects of a report's ``summary``."""
    return [r.as_dict() for r in rows]
