"""The audit's contract: what every check is, and the one registry that every audit iterates.

``pfd distill``'s gate, ``pfd attack``, ``pfd card`` and the benchmark run the same registered
checks (:func:`pfd.audit.engine.run_audit`) and take the one verdict of
:func:`pfd.audit.verdict.decide`. A check is the release's integrity, its private copies, OGP's
margin, the judge's competence, or an attack (linkability, hubness, the source's rank,
reconstruction, attributes, membership); each is a class with its own config dataclass, a test of
whether it can run on what the audit was given, and a ``run`` that returns a result which renders
its own report parts::

    @register_check
    class MyAttack(Check):
        name, title, flag_prefix = "my_attack", "My attack", "my"
        config = MyConfig                      # a dataclass; pfd attack gets one option per field
        gates, cost = True, "seconds"          # whether it decides publication; what it costs
        def applicable(self, inputs): ...      # None, or why it cannot run (the report lists it)
        def run(self, inputs): ...             # -> an CheckResult

:func:`pfd.audit.engine.run_audit` runs every registered check (:func:`ordered_checks`: the
pass/fail checks, then the attacks, each in registration order) on one :class:`AuditInputs`
(the release on disk or in memory, its state, the private set, the
attackers and their embeddings, and the results of the checks that ran before);
the report pages (:mod:`pfd.attacks.scorecard.report`) write what the results render. Each summary row states its
chance level, a 95 % interval (or a p-value) and its nominal verdict (:func:`verdict`, 95 %),
which :func:`pfd.audit.verdict.decide` replaces by the family-wise one; a pass/fail check's row is
:func:`check_row`. ``tests/attacks/test_contract.py`` runs over every
registered attack; docs/attacks.md, "Adding an attack", walks through one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Mapping, Sequence

from pfd.audit.grid import MatchGrid
from pfd.audit.risk import IdentityLinks
from pfd.audit.rows import AuditRow
from pfd.errors import PfdError

if TYPE_CHECKING:  # the registry is read by the CLI at start-up, before torch is needed
    import numpy as np
    import torch

#: A user's reconstructor: ``f(embeddings (n, D) unit rows, public-model space) -> images (n, 3, H, W) in [0, 1]``.
Reconstructor = Callable[["torch.Tensor"], "torch.Tensor"]

__all__ = ["verdict", "summary_row", "check_row", "Clock", "AuditInputs", "CheckResult", "Check", "CHECKS", "register_check",
           "load_checks", "ordered_checks", "ENTRY_POINTS", "Reconstructor", "option", "check_options"]


def verdict(ci: tuple[float, float] | list[float] | None, chance: float, *, p: float | None = None,
            alpha: float = 0.05) -> str:
    """The verdict of one figure.

    With a p-value (a test): ``"LEAKS"`` if ``p <= alpha``, else ``"≈ chance"``. Otherwise from the
    interval: ``"LEAKS"`` if it lies above chance, ``"below chance"`` if below, else ``"≈ chance"``.
    """
    if p is not None:
        return "LEAKS" if p <= alpha else "≈ chance"
    assert ci is not None
    lo, hi = float(ci[0]), float(ci[1])
    if lo > chance:
        return "LEAKS"
    if hi < chance:
        return "below chance"
    return "≈ chance"


def summary_row(attack: str, attacker: str, value: float, chance: float, ci: Any, kind: str, *,
                test_p: float | None = None, **fields: Any) -> AuditRow:
    """One row of the summary table, with its nominal 95 % verdict (:func:`verdict`).

    Args:
        attack: What was measured (``"VisMatch (proxies)"``).
        attacker: Whose model (``public``, ``insider``, ...).
        value: The figure.
        chance: Its chance level.
        ci: Its 95 % interval (``None`` for a pure test).
        kind: ``"rate"`` (count/n), ``"score"`` (a metric in [0, 1]) or ``"auc"``.
        test_p: A test's p-value: the verdict is the test's.
        fields: More of :class:`~pfd.audit.rows.AuditRow`'s fields (``count``, ``n``, ``people``, ...);
            any other name is the attack's own (:attr:`~pfd.audit.rows.AuditRow.extra`).
    """
    return AuditRow.from_dict(dict(attack=attack, attacker=attacker, value=float(value), chance=float(chance),
                                   ci95=ci, kind=kind, verdict=verdict(ci, chance, p=test_p), p=test_p, **fields))


def check_row(name: str, passed: bool, detail: str, *, check: str, value: float = 0.0, **fields: Any) -> AuditRow:
    """The row of a pass/fail check (``kind = "check"``): the verdict counts it, outside the family-wise test.

    Args:
        name: The check's title (``"Release integrity"``).
        passed: Whether it passed.
        detail: What it measured or found (one line; the first finding when it failed).
        check: The check's registry name (``"integrity"``): the remedy table's key.
        value: A number to show (findings, a share).
        fields: More fields, as :func:`summary_row`.
    """
    return AuditRow.from_dict(dict(attack=name, attacker="-", value=float(value), chance=0.0, ci95=None, kind="check",
                                   check=check, passed=bool(passed), detail=detail,
                                   verdict="passed" if passed else "FAILED", **fields))


class Clock:
    """Wall-clock seconds per stage, for the report."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the seconds of the ``with`` block to stage ``name`` (also when it raises)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


@dataclass
class AuditInputs:
    """What every attack of one scorecard run gets.

    Attributes:
        cfg: The shared settings (:class:`~pfd.config.AttackConfig`).
        state: The release and the publisher's state (:class:`~pfd.audit.inputs.ReleaseState`).
        sets: The private set and the release, opened once per image size (``private(size)``, ``proxies(size)``).
        attackers: The models, the public one first, then the insider, the gate's judge and the auditor's own.
        source: ``(q,)`` private label of each proxy (scoring only).
        labels: ``(g,)`` private labels.
        private_spec: How the private set was given.
        progress: Progress bars.
        clock: Seconds per stage.
        reconstructor: A user's reconstructor (replaces the BN-prior inversion), or ``None``.
        results: The results of the attacks that ran before, by name.
        skipped: Why an attack or a part of one did not run, by name.
        cache_dir: The embedding cache for the private set (``None``: none); the proxies are new to
            every audit and never cached.
    """

    cfg: Any
    state: Any
    sets: Any
    attackers: list[Any]
    source: "np.ndarray"
    labels: "np.ndarray"
    private_spec: str
    progress: bool = True
    clock: Clock = field(default_factory=Clock)
    reconstructor: "Reconstructor | None" = None
    results: dict[str, "CheckResult"] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    cache_dir: "Any" = None
    _emb: "dict[str, dict[str, torch.Tensor]]" = field(default_factory=dict, repr=False)

    @property
    def public(self) -> Any:
        """The public attacker (the first)."""
        return self.attackers[0]

    def embeddings(self, attacker: Any) -> "dict[str, torch.Tensor]":
        """``{"private": (g, D), "proxies": (q, D)}`` of one attacker, embedded once per run."""
        if attacker.role not in self._emb:
            size = attacker.input_size(self.state.image_size)
            with self.clock.stage("embed"):
                self._emb[attacker.role] = {"private": attacker.embed(self.sets.private(size), cache_dir=self.cache_dir),
                                            "proxies": attacker.embed(self.sets.proxies(size))}
        return self._emb[attacker.role]


class CheckResult:
    """What an attack found; it renders its own parts of the report (override what applies)."""

    def sections(self) -> dict[str, Any]:
        """Its keys of ``report.json`` (a list under a key another result also fills is concatenated)."""
        return {}

    def rows(self) -> list[AuditRow]:
        """Its rows of the summary table (:func:`summary_row`, :func:`check_row`)."""
        return []

    def markdown(self) -> list[str]:
        """Its section of ``report.md`` (lines)."""
        return []

    def plots(self, folder: Path) -> dict[str, str]:
        """Write its plots into ``folder``; ``{name: file name}``."""
        return {}

    def identity_links(self) -> Sequence[IdentityLinks]:
        """Its links of proxies to private people that the per-identity risk table counts
        (:func:`pfd.audit.risk.per_identity_risk`); none by default."""
        return []

    def grid(self, inputs: AuditInputs, rows: int) -> MatchGrid | None:
        """The report's image grid, built after every check ran (``None``: this result shows none)."""
        return None


class Check(ABC):
    """One check of the audit (see the module docstring).

    Class attributes:
        name: Registry key, also the key of its settings in ``report.json`` and of its
            ``[attack.<name>]`` recipe table.
        title: Its name in the report.
        config: Its config dataclass (fields with :func:`option` metadata become ``pfd attack`` options).
        flag_prefix: Prefix of its options' flags (``--<prefix>-<field>``) unless a field names its flag.
        gates: Whether its rows decide publication (a row may still say ``gates: False``).
        cost: ``"seconds"`` or ``"minutes"`` on the demo's size (the docs' table of checks).
        stage: When it runs: 0 for the pass/fail checks of the release and the models (a failed one
            explains the figures after it), 1 for the attacks; registration order within a stage.
        when_skipped: What its absence means for the verdict: ``"gap"`` (a gating check that did not
            run: the verdict names it), ``"optional"`` (a matter of the inputs given: nothing) or
            ``"not audited"`` (an attack whose inputs were not given: the verdict says it was not measured).
        empty_sections: Its keys of ``report.json`` when it did not run (readers expect the layout).
        embeddings_only: Whether it runs on the attackers' embeddings alone (the null simulation,
            :mod:`pfd.attacks.null`, runs exactly these on simulated embeddings).
        rows_per_attacker: Its gating rows per cosine attacker (the null simulation's count of tests).

    Args:
        config: An instance of :attr:`config`.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    config: ClassVar[type]
    flag_prefix: ClassVar[str] = ""
    gates: ClassVar[bool] = True
    cost: ClassVar[str] = "seconds"
    stage: ClassVar[int] = 1
    when_skipped: ClassVar[str] = "gap"
    empty_sections: ClassVar[dict[str, Any]] = {}
    embeddings_only: ClassVar[bool] = False
    rows_per_attacker: ClassVar[int] = 0

    def __init__(self, config: Any) -> None:
        self.cfg = config

    @classmethod
    def page(cls, data: Mapping[str, Any]) -> list[str]:
        """Its own HTML section of the report pages (``pfd attack``'s and ``pfd card``'s), read from
        ``report.json``'s data; ``[]`` when its rows in the summary say it all."""
        return []

    @abstractmethod
    def applicable(self, inputs: AuditInputs) -> str | None:
        """``None`` when it can run on ``inputs``, else the reason it cannot (one line, with the fix)."""

    @abstractmethod
    def run(self, inputs: AuditInputs) -> CheckResult:
        """Run it; raises :class:`~pfd.errors.PfdError` for bad input."""


#: Registered checks by name, in registration order (:func:`ordered_checks` is the order they run in).
CHECKS: dict[str, type[Check]] = {}
#: The entry-point group through which a package registers checks: each entry names a module whose
#: import registers them (pfd's built-in attacks: ``pfd.attacks.builtin``, declared in pyproject.toml).
ENTRY_POINTS = "pfd.checks"
_WHEN_SKIPPED = ("gap", "optional", "not audited")
_loaded: set[str] = set()


def register_check(cls: type[Check]) -> type[Check]:
    """Class decorator: add a check to :data:`CHECKS` (its name must be new)."""
    if cls.name in CHECKS:
        raise ValueError(f"attack {cls.name!r} is already registered")
    if not dataclasses.is_dataclass(cls.config):
        raise TypeError(f"attack {cls.name!r}: config must be a dataclass")
    if cls.when_skipped not in _WHEN_SKIPPED:
        raise ValueError(f"attack {cls.name!r}: when_skipped must be one of {', '.join(_WHEN_SKIPPED)}")
    CHECKS[cls.name] = cls
    return cls


def load_checks() -> dict[str, type[Check]]:
    """:data:`CHECKS` with every installed package's checks registered.

    Imports each module of the :data:`ENTRY_POINTS` group once, by entry name (pfd's own attacks
    and any plug-in's): the audit's floor names no attack, the attacks register themselves.

    Raises:
        PfdError: No attack is registered (pfd was not installed, so its entry points are unknown).
    """
    for ep in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        if ep.value not in _loaded:
            ep.load()
            _loaded.add(ep.value)
    if not any(cls.stage > 0 for cls in CHECKS.values()):
        raise PfdError(f"no attack is registered (entry-point group {ENTRY_POINTS!r} is empty): install pfd "
                       "(pip install -e .) rather than running it from a source tree on PYTHONPATH")
    return CHECKS


def ordered_checks() -> list[type[Check]]:
    """Every registered check (:func:`load_checks`) in the order an audit runs them: by
    :attr:`Check.stage`, then by registration."""
    return sorted(load_checks().values(), key=lambda cls: cls.stage)


def option(default: Any = dataclasses.MISSING, *, help: str, flag: str | None = None, cli: bool = True,
           **kw: Any) -> Any:
    """A config field with its ``pfd attack`` option: ``help`` text, an explicit ``flag``, or ``cli=False``
    for a setting read from the recipe only (``[attack.<name>]``)."""
    return field(default=default, metadata={"help": help, "flag": flag, "cli": cli}, **kw)


@dataclass(frozen=True)
class _Option:
    attack: str
    field: str
    flag: str
    type: Any
    help: str


def check_options() -> list[_Option]:
    """The ``pfd attack`` options of every registered attack's config: one per field with :func:`option`
    metadata; a bool field is an on/off switch (``--x/--no-x``)."""
    out = []
    for name, cls in CHECKS.items():
        for f in dataclasses.fields(cls.config):
            meta = f.metadata
            if not meta.get("cli", False):
                continue
            flag = meta.get("flag") or f"--{cls.flag_prefix}-{f.name}".replace("_", "-")
            out.append(_Option(name, f.name, flag, f.type, meta["help"]))
    return out
