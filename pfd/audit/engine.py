"""The audit: every registered check on a release, the figures they found, and the one verdict.

``pfd attack --release R --private P --state-dir S --report OUT`` calls :func:`run_scorecard`,
which opens and cross-checks the inputs once (the release, the publisher's state dir, the private
set and the attackers: ``public`` (the public model), ``insider`` (the publisher's adapted model,
worst case), the gate's ``judge`` and every outside attacker the auditor brings with
``--attacker``), then :func:`run_audit` runs each check of the registry
(:data:`pfd.audit.contract.CHECKS`, in registration order: integrity, private copies, OGP's
margin, the judge's competence, then the attacks: linkability, its hubness-corrected form, the
source's rank, reconstruction, attribute recovery, membership) that is applicable; why another did
not run goes to ``skipped``. :func:`pfd.audit.verdict.decide` turns the rows into the verdict.
``pfd distill``'s gate calls :func:`audit_in_memory`: the same checks and verdict on the release
before it is written, with the state dir's models. ``pfd card`` and the benchmark call
:func:`run_scorecard`.

The proxy -> source map of the state dir is used only to score. The returned :class:`Scorecard`
holds the results, which render their own report parts;
:func:`pfd.attacks.scorecard.report.write_report` writes ``report.json``, ``report.md`` and the plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import pfd.audit.checks  # noqa: F401 - registers the pass/fail checks
from pfd.audit.contract import AuditInputs, CheckResult, Clock, Reconstructor, ordered_checks
from pfd.audit.grid import MatchGrid
from pfd.audit.inputs import ReleaseState, open_release_state, proxy_sources, unwritten_release_state
from pfd.audit.risk import per_identity_risk
from pfd.audit.rows import AuditRow, rows_to_json
from pfd.audit.sets import MemorySets, OpenedPrivateSets, ReleaseSets
from pfd.audit.team import outside_attackers, own_attackers, refuse_duplicate_models
from pfd.audit.verdict import LEVEL, RULE_OUT, Verdict, decide
from pfd.config import AttackConfig, build_config, config_to_dict
from pfd.config.checks import outer_key
from pfd.data.faceset import FaceSet
from pfd.data.shape import plain_size
from pfd.data.sources import open_faces
from pfd.errors import PfdError
from pfd.release.private_set import check_audited_private_set
from pfd.release.state_dir import StateDir
from pfd.release.writer import release_layout

__all__ = ["Scorecard", "attack_configs", "open_audit", "run_scorecard", "run_audit", "audit_in_memory"]


@dataclass
class Scorecard:
    """What a scorecard run produced.

    Attributes:
        data: JSON-ready figures (see :mod:`pfd.attacks.scorecard.report` for the layout).
        grid: Images of the match grid (:class:`~pfd.audit.grid.MatchGrid`; ``None`` before the
            release is written).
        results: Each attack's result, by name (they render their report parts).
        verdict: The one verdict (:func:`pfd.audit.verdict.decide`).
        rows: The summary table's rows in the order the checks ran, each with chance, interval and the
            family-wise verdict (``data["summary"]`` holds them as JSON).
    """

    data: dict[str, Any]
    grid: MatchGrid | None = None
    results: dict[str, CheckResult] = field(default_factory=dict)
    verdict: Verdict | None = None
    rows: list[AuditRow] = field(default_factory=list)


def attack_configs(cfg: AttackConfig) -> dict[str, Any]:
    """Each registered attack's config, built from its table of ``cfg.attacks`` and checked.

    Raises:
        PfdError: A table of an attack that does not exist, or a setting out of range.
    """
    checks = ordered_checks()
    unknown = sorted(set(cfg.attacks) - {cls.name for cls in checks})
    if unknown:
        raise PfdError(f"[{outer_key('attack.' + unknown[0])}]: no such attack; the attacks are "
                       f"{', '.join(cls.name for cls in checks)}")
    return {cls.name: build_config(cls.config, cfg.attacks.get(cls.name, {}), where=f"attack.{cls.name}")
            for cls in checks}


def run_scorecard(
    cfg: AttackConfig, *, reconstructor: Reconstructor | None = None, attackers: list[Any] | None = None,
    progress: bool = True, level: float = LEVEL, rule_out: float = RULE_OUT, private: FaceSet | None = None,
) -> Scorecard:
    """Run every applicable registered check on a written release: :func:`open_audit`, then :func:`run_audit`.

    Args:
        cfg: The attack configuration (release, state dir, private set, options; each attack's own
            settings in ``cfg.attacks``).
        attackers: Outside attackers in addition to ``cfg.attackers``: paths, ``module:callable``,
            ``nn.Module`` objects, functions ``images (B, 3, H, W) -> embeddings`` or
            :class:`~pfd.attackers.outside.AttackerSpec` (model + input convention). Each adds
            linkability rows (proxies and reconstructions) beside ``public`` and ``insider``.
        reconstructor: Replaces the built-in BN-prior inversion: ``f(embeddings (n, D) unit rows,
            public-model space) -> images (n, 3, H, W) in [0, 1]`` (e.g. an Arc2Face wrapper).
        progress: Progress bars.
        level: The verdict's family-wise level (:data:`pfd.audit.verdict.LEVEL`).
        rule_out: The multiple of chance each proxy rate must exclude.
        private: The private set, already opened at the attackers' image size, where its spec
            (``cfg.private``, or the state dir's record) names nothing :func:`pfd.data.sources.open_faces`
            opens: the benchmark's in-memory sets. Its identities must be the ones the state dir recorded.

    Returns:
        The :class:`Scorecard` (write it with :func:`pfd.attacks.scorecard.report.write_report`).

    Raises:
        PfdError: For missing or mismatched inputs (release, state dir, private set, models) or settings.
    """
    configs = attack_configs(cfg)  # every attack's settings checked before any work
    inputs = open_audit(cfg, reconstructor=reconstructor, attackers=attackers, progress=progress,
                        sets=None if private is None else OpenedPrivateSets(private, cfg.private or "", Path(cfg.release),
                                                                            skip_bad=cfg.skip_bad))
    return run_audit(inputs, configs, level=level, rule_out=rule_out)


def open_audit(
    cfg: AttackConfig, *, state: ReleaseState | None = None, sets: ReleaseSets | None = None,
    reconstructor: Reconstructor | None = None, attackers: list[Any] | None = None, progress: bool = True,
) -> AuditInputs:
    """Open and cross-check a written release's audit once: its state, the private set, the attackers.

    ``pfd card`` opens the release's state and its data sets through the same :class:`ReleaseSets`
    (it checks them against its own inputs first) and hands both over, so nothing is opened twice.

    Args:
        cfg: The audit's settings (:func:`run_scorecard`).
        state: The release's state, already opened with :func:`~pfd.audit.inputs.open_release_state`.
        sets: The private set, the release and other data sets (``--holdout``, ``--public``), where the caller
            has opened them (their cache seeded).
        reconstructor: As :func:`run_scorecard`.
        attackers: As :func:`run_scorecard`.
        progress: Progress bars.

    Returns:
        The :class:`~pfd.audit.contract.AuditInputs` :func:`run_audit` reads.

    Raises:
        PfdError: For missing or mismatched inputs (release, state dir, private set, models).
    """
    clock = Clock()
    if not cfg.release or not cfg.state_dir:
        raise PfdError("pass --release (the released folder) and --state-dir (the publisher's state dir)")
    if state is None:
        with clock.stage("load"):
            state = open_release_state(cfg.release, cfg.state_dir)
    private_spec = cfg.private or state.private_spec
    if not private_spec:
        raise PfdError(f"no private set: pass --private (the state dir {state.state_dir} records none)")
    if sets is None:  # nothing is opened yet: each set opens at the first attacker's size that asks for it
        sets = ReleaseSets(private_spec, state.release, skip_bad=cfg.skip_bad,
                           recorded_in=None if cfg.private else state.state_dir)
    sets.private_spec = sets.private_spec or private_spec
    with clock.stage("load"):
        own = own_attackers(cfg, state, progress)
        outside = outside_attackers(cfg, list(attackers or []), [a.role for a in own], progress)
        models = own + outside
        refuse_duplicate_models(own, outside)
        size = models[0].size
        private0 = sets.private(size)
        source = proxy_sources(state, sets.proxies(size).names, private0, private_spec=private_spec)
        _check_recorded_private(state, sets, private_spec)
    return AuditInputs(cfg=cfg, state=state, sets=sets, attackers=models, source=source, labels=private0.labels,
                       private_spec=private_spec, progress=progress, clock=clock, reconstructor=reconstructor)


def _check_recorded_private(state: ReleaseState, sets: ReleaseSets, spec: str) -> None:
    """The private set by content: the pixel digests the state dir recorded, at the run's size."""
    size = state.run_size
    if size is not None:
        check_audited_private_set(StateDir.at(state.state_dir).private_set, sets.private(size), spec=spec)


def run_audit(inputs: AuditInputs, configs: dict[str, Any], *, level: float = LEVEL,
              rule_out: float = RULE_OUT) -> Scorecard:
    """Run every applicable registered check on opened inputs and decide (the one engine).

    Args:
        inputs: The release (on disk or in memory), its state, the private set and the attackers.
        configs: Each check's config (:func:`attack_configs`).
        level: The verdict's family-wise level (:data:`pfd.audit.verdict.LEVEL`).
        rule_out: The multiple of chance each proxy rate must exclude.

    Returns:
        The :class:`Scorecard`: its ``data["summary"]`` rows carry the family-wise verdict,
        ``data["verdict"]`` and :attr:`Scorecard.verdict` the decision.

    Raises:
        PfdError: Bad input, or a setting under which a gating test could never flag.
    """
    cfg, state, sets, clock = inputs.cfg, inputs.state, inputs.sets, inputs.clock
    checks = ordered_checks()
    for cls in checks:
        check = cls(configs[cls.name])
        why = check.applicable(inputs)
        if why is not None:
            inputs.skipped[cls.name] = why
            continue
        inputs.results[cls.name] = check.run(inputs)
    absence = {cls.name: cls.when_skipped for cls in checks}
    rows = [row for r in inputs.results.values() for row in r.rows()]
    gaps = {cls.name for cls in checks if cls.gates and cls.when_skipped == "gap"}
    verdict = decide(rows, level=level, rule_out=rule_out,
                     skipped={k: v for k, v in inputs.skipped.items() if k in gaps},
                     not_audited={k: v for k, v in inputs.skipped.items() if absence[k] == "not audited"})
    source, private0 = inputs.source, sets.private(inputs.attackers[0].size)
    data: dict[str, Any] = {
        "format": "pfd-attack-report",
        "version": 1,
        "settings": {**config_to_dict(cfg), **{n: config_to_dict(c) for n, c in configs.items()}},
        "release": {"path": str(state.release), "method": state.method,
                    "image_size": plain_size(state.image_size) if state.image_size else 0,
                    "num_classes": int(state.manifest.get("num_classes", len(np.unique(source)))),
                    "num_images": len(source)},
        "private": {"spec": inputs.private_spec, "identities": private0.num_classes, "images": len(private0),
                    "source_identities": int(len(np.unique(source)))},
        "attackers": [a.describe() for a in inputs.attackers],
        "verdict": verdict.as_dict(),
        "summary": rows_to_json(rows),
    }
    for result in inputs.results.values():
        for key, value in result.sections().items():
            if isinstance(value, list) and isinstance(data.get(key), list):
                data[key] = data[key] + value  # the reconstructions' links join the proxies'
            elif isinstance(value, dict) and isinstance(data.get(key), dict) and key == "checks":
                data[key] = {**data[key], **value}
            else:
                data[key] = value
    for cls in checks:  # the layout readers expect, whether or not the check ran
        for key, empty in cls.empty_sections.items():
            data.setdefault(key, type(empty)())
    links = [link for r in inputs.results.values() for link in r.identity_links()]
    data["per_identity"] = per_identity_risk(links, source, private0.labels, private0.identities)
    data["skipped"] = inputs.skipped
    data["timings"] = clock.seconds
    grid = None
    if state.release is not None:  # nothing to show before the release is written
        grid = next((g for r in inputs.results.values() if (g := r.grid(inputs, cfg.grid_rows)) is not None), None)
    return Scorecard(data=data, grid=grid, results=inputs.results, verdict=verdict, rows=rows)


def audit_in_memory(
    cfg: AttackConfig, *, proxies: np.ndarray, source: np.ndarray, private: FaceSet, state_dir: str | Path,
    method: str, label_seed: int, progress: bool = False, cache_dir: str | Path | None = None,
    level: float = LEVEL, rule_out: float = RULE_OUT,
) -> Scorecard:
    """The audit of a release before it is written (``pfd distill``'s gate): the same checks and verdict.

    Args:
        cfg: The audit's settings (the same :class:`~pfd.config.AttackConfig` ``pfd attack`` builds).
        proxies: ``(n, 3, H, W)`` uint8, exactly the pixels the release would hold, in internal order.
        source: ``(n,)`` each proxy's source label in ``private`` (its internal class too).
        private: The private set at the release's size.
        state_dir: The run's state dir (its public, adapted and judge models, prototypes and config).
        method: The method (for the report).
        label_seed: The release's label seed (its layout: :func:`pfd.release.writer.release_layout`).
        progress: Progress bars.
        cache_dir: The embedding cache for the private set.
        level: The verdict's family-wise level.
        rule_out: The multiple of chance each proxy rate must exclude.

    Returns:
        The :class:`Scorecard` (no match grid: nothing is on disk yet).
    """
    clock = Clock()
    configs = attack_configs(cfg)
    size = tuple(int(v) for v in proxies.shape[-2:])
    state = unwritten_release_state(state_dir, method=method, image_size=size, num_classes=len(np.unique(source)))
    with clock.stage("load"):
        models = own_attackers(cfg, state, progress)
    # The private set as pfd attack and pfd card open it, from its spec (what the attribute probe's
    # default auxiliary set and every cache key derive from); the run's own copy only where the spec
    # names nothing that opens (a benchmark's in-memory set).
    spec = cfg.private or ""
    try:
        opened = open_faces(spec, size=private.size, skip_bad=cfg.skip_bad) if spec else None
    except PfdError:
        opened = None
    if opened is not None and len(opened) == len(private) and list(opened.identities) == list(private.identities):
        private = opened
    source = np.asarray(source)
    files, _, _ = release_layout(source, label_seed=label_seed, avoid_labels=private.identities)
    order = np.argsort(np.asarray(files), kind="stable")  # a reader lists label folders, then files, sorted
    sets = MemorySets(private, cfg.private or "the private set", proxies[order], [files[i] for i in order],
                      skip_bad=cfg.skip_bad)
    inputs = AuditInputs(cfg=cfg, state=state, sets=sets, attackers=models, source=source[order],
                         labels=np.asarray(private.labels), private_spec=sets.private_spec, progress=progress,
                         clock=clock, cache_dir=cache_dir)
    return run_audit(inputs, configs, level=level, rule_out=rule_out)
