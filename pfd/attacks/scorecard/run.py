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

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import pfd.audit.checks  # noqa: F401 - registers the pass/fail checks first
import pfd.attacks.builtin  # noqa: F401 - then the built-in attacks, in the order they run
from pfd.audit.contract import CHECKS, AuditInputs, CheckResult, Clock
from pfd.audit.verdict import LEVEL, RULE_OUT, Verdict, decide
from pfd.attacks.linkability.reconstruction import Reconstructor
from pfd.attacks.models.loading import Attacker, load_attacker, load_outside_attacker
from pfd.attacks.models.outside import InputConvention
from pfd.attacks.scorecard.risk import per_identity_risk
from pfd.attacks.scorecard.inputs import (ReleaseState, open_release_state, proxy_sources, recorded_private_unopenable,
                                         state_private_spec, state_run_size)
from pfd.config import AttackConfig, build_config, config_to_dict
from pfd.config.checks import outer_key
from pfd.data.faceset import FaceSet
from pfd.data.shape import plain_size, same_size, size_text
from pfd.data.sources import open_faces
from pfd.errors import PfdError
from pfd.release.reader import read_release
from pfd.release.state_dir import StateDir

__all__ = ["Scorecard", "ReleaseSets", "OpenedPrivateSets", "MemorySets", "attack_configs", "run_scorecard", "run_audit", "audit_in_memory"]


@dataclass
class Scorecard:
    """What a scorecard run produced.

    Attributes:
        data: JSON-ready figures (see :mod:`pfd.attacks.scorecard.report` for the layout).
        grid: Images of the match grid: ``{"proxies", "matches", "sources", "reconstructions"?}``
            tensors ``(r, 3, H, W)`` and ``"success"`` (r,) bool.
        results: Each attack's result, by name (they render their report parts).
    """

    data: dict[str, Any]
    grid: dict[str, Any] = field(default_factory=dict)
    results: dict[str, CheckResult] = field(default_factory=dict)
    verdict: Verdict | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The summary table's rows, in the registry's order (each with chance, interval and the
        family-wise verdict of :func:`pfd.audit.verdict.decide`)."""
        return self.data.get("summary") or [row for r in self.results.values() for row in r.rows()]


class ReleaseSets:
    """The private set and the release, opened once per image size."""

    def __init__(self, private_spec: str, release: Path, *, skip_bad: bool = False) -> None:
        self.private_spec, self.release, self.skip_bad = private_spec, release, skip_bad
        self._private: dict[Any, FaceSet] = {}
        self._release: dict[Any, FaceSet] = {}

    def private(self, size: Any) -> FaceSet:
        if size not in self._private:
            self._private[size] = open_faces(self.private_spec, size=size, skip_bad=self.skip_bad)
        return self._private[size]

    def proxies(self, size: Any) -> FaceSet:
        if size not in self._release:
            self._release[size] = read_release(self.release, size=size)
        return self._release[size]

    def released_pixels(self) -> list[tuple[str, np.ndarray]]:
        """``(name, (H, W, 3) uint8)`` of every released image, as written."""
        from PIL import Image

        out = []
        for name in read_release(self.release).names:
            with Image.open(self.release / name) as im:
                out.append((name, np.asarray(im.convert("RGB"), dtype=np.uint8)))
        return out


class OpenedPrivateSets(ReleaseSets):
    """A written release and a private set the caller has already opened (a benchmark's set that
    lives only in memory, e.g. ``celeba:private+lowres``), at the attackers' image size.

    Args:
        private: The private set.
        private_spec: How it is named in the report.
        release: The released folder.
        skip_bad: As :class:`ReleaseSets`.
    """

    def __init__(self, private: FaceSet, private_spec: str, release: Path, *, skip_bad: bool = False) -> None:
        super().__init__(private_spec, release, skip_bad=skip_bad)
        self._base = private

    def private(self, size: Any) -> FaceSet:
        if size is not None and not same_size(size, self._base.size):
            raise PfdError(f"the private set given ({private_spec_text(self.private_spec)}) is "
                           f"{size_text(self._base.size)} but an attacker takes {size_text(size)} images; open it at "
                           "that size, or pass its spec instead")
        return self._base


def private_spec_text(spec: str) -> str:
    return spec if len(spec) <= 80 else spec[:77] + "..."


class MemorySets(ReleaseSets):
    """The private set and a release still in memory (the gate's, before it is written).

    The proxies are held in the order, and under the names, that the written release will have
    (:func:`pfd.release.writer.release_layout`), and read at another size through the reader's own
    resize (:func:`pfd.release.reader.release_tensor`): the audit before writing and the audit of
    the written release see the same images in the same order.

    Args:
        private: The private set (at the release's size).
        private_spec: How it was given.
        proxies: ``(n, 3, H, W)`` uint8: exactly the pixels that would be released, in ``names``' order.
        names: ``(n,)`` each proxy's file in the release, sorted as a reader lists them.
        skip_bad: As :class:`ReleaseSets`.
    """

    def __init__(self, private: FaceSet, private_spec: str, proxies: np.ndarray, names: list[str], *,
                 skip_bad: bool = False) -> None:
        super().__init__(private_spec, Path("<in memory>"), skip_bad=skip_bad)
        self._base = private
        self._pixels = np.ascontiguousarray(proxies.transpose(0, 2, 3, 1))  # (n, H, W, 3)
        self.names = list(names)

    def private(self, size: Any) -> FaceSet:
        from pfd.data.shape import same_size

        if size not in self._private:
            self._private[size] = (self._base if size is None or same_size(size, self._base.size) else
                                   open_faces(self.private_spec, size=size, skip_bad=self.skip_bad))
        return self._private[size]

    def proxies(self, size: Any) -> FaceSet:
        from pfd.data.faceset import TensorFaces
        from pfd.release.reader import release_tensor

        if size not in self._release:
            want = size or tuple(self._pixels.shape[1:3])
            x = torch.stack([release_tensor(img, want) for img in self._pixels])  # (n, 3, H, W)
            self._release[size] = TensorFaces(x, np.zeros(len(x), dtype=np.int64), names=self.names)
        return self._release[size]

    def released_pixels(self) -> list[tuple[str, np.ndarray]]:
        return list(zip(self.names, self._pixels))


def _attackers(cfg: AttackConfig, state: ReleaseState, progress: bool) -> list[Attacker]:
    common = dict(batch_size=cfg.batch_size, flip=cfg.flip, progress=progress)
    public = cfg.public_model or state.public_model
    if public is None:
        raise PfdError(f"{StateDir.at(state.state_dir).public_model}: missing; pass the attacker's model with --public-model")
    out = [load_attacker(public, role="public", size=cfg.public_model_size or None, **common)]
    if cfg.insider:
        if state.adapted_model is None:
            raise PfdError(f"{StateDir.at(state.state_dir).adapted}: missing; pass the state dir pfd distill wrote, "
                           "or --no-insider to skip the insider attacker")
        insider = load_attacker(state.adapted_model, role="insider", **common)
        if state.image_size and not same_size(insider.size, state.image_size):
            raise PfdError(f"{state.adapted_model}: the adapted model takes {size_text(insider.size)} images but the "
                           f"release is {size_text(state.image_size)}; the state dir does not belong to this release")
        out.append(insider)
    if state.judge_model is not None:  # the gate's judge: the scorecard shows what vouched for the release
        out.append(load_attacker(state.judge_model, role="judge", **common))
    return out


def _outside(cfg: AttackConfig, extra: list[Any], taken: list[str], progress: bool) -> list[Attacker]:
    """The auditor's own models (``cfg.attackers`` then ``extra``), with unique row labels."""
    conv = InputConvention(size=cfg.attacker_size or None, mean=_one_or_three(cfg.attacker_mean),
                           std=_one_or_three(cfg.attacker_std), resize=cfg.attacker_resize,
                           distance=cfg.attacker_distance, channels=cfg.attacker_channels)
    out: list[Attacker] = []
    names = list(taken)
    for spec in [*cfg.attackers, *extra]:
        if _is_checkpoint(spec):  # a pfd / insightface / AdaFace checkpoint carries its own convention
            a = load_attacker(spec, role=Path(str(spec)).stem, batch_size=cfg.batch_size, flip=cfg.flip, progress=progress)
        else:
            a = load_outside_attacker(spec, convention=conv, batch_size=cfg.batch_size, flip=cfg.flip,
                                      progress=progress)
        role, i = a.role, 2
        while role in names:  # two files with the same stem, or a stem "public"
            role, i = f"{a.role}#{i}", i + 1
        a.role = role
        names.append(role)
        out.append(a)
    return out


def _is_checkpoint(spec: Any) -> bool:
    """Whether ``--attacker`` names a checkpoint pfd loads itself (not ONNX, TorchScript, TOML or Python)."""
    from pfd.attacks.models.loading import is_torchscript
    from pfd.attacks.models.outside import is_entry_point

    if not isinstance(spec, (str, os.PathLike)) or is_entry_point(spec):
        return False
    p = Path(spec)
    return p.is_file() and p.suffix.lower() not in (".onnx", ".toml") and not is_torchscript(p)


def _weights_digest(a: Attacker) -> str | None:
    """sha256 of an attacker's weights (:func:`pfd.embed.hash_state_dict`); ``None`` for a callable."""
    import hashlib

    from pfd.embed import hash_state_dict

    state = getattr(a.model, "state_dict", None)
    if state is None:
        return None
    sd = state()
    if not sd:
        return None
    h = hashlib.sha256()
    hash_state_dict(h, sd)
    return h.hexdigest()


def _refuse_duplicate_models(own: list[Attacker], outside: list[Attacker]) -> None:
    """An outside attacker with the same weights as another attacker (the public model passed again as
    ``--attacker``) would repeat its rows and tighten every family-wise threshold for nothing (issue 34)."""
    if not outside:
        return
    seen: dict[str, Attacker] = {}
    for a in own:
        d = _weights_digest(a)
        if d is not None:
            seen.setdefault(d, a)
    for a in outside:
        d = _weights_digest(a)
        if d is None:
            continue
        if d in seen:
            raise PfdError(f"--attacker {a.path}: the same weights as the {seen[d].role} attacker ({seen[d].path}); "
                           "its rows would repeat that attacker's: pass each model once")
        seen[d] = a


def _one_or_three(v: Any) -> Any:
    vals = [float(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    return vals[0] if len(vals) == 1 else tuple(vals)


def attack_configs(cfg: AttackConfig) -> dict[str, Any]:
    """Each registered attack's config, built from its table of ``cfg.attacks`` and checked.

    Raises:
        PfdError: A table of an attack that does not exist, or a setting out of range.
    """
    unknown = sorted(set(cfg.attacks) - set(CHECKS))
    if unknown:
        raise PfdError(f"[{outer_key('attack.' + unknown[0])}]: no such attack; the attacks are {', '.join(CHECKS)}")
    return {name: build_config(cls.config, cfg.attacks.get(name, {}), where=f"attack.{name}")
            for name, cls in CHECKS.items()}


def run_scorecard(
    cfg: AttackConfig, *, reconstructor: Reconstructor | None = None, attackers: list[Any] | None = None,
    progress: bool = True, level: float = LEVEL, rule_out: float = RULE_OUT, private: FaceSet | None = None,
) -> Scorecard:
    """Run every applicable registered attack on a release.

    Args:
        cfg: The attack configuration (release, state dir, private set, options; each attack's own
            settings in ``cfg.attacks``).
        attackers: Outside attackers in addition to ``cfg.attackers``: paths, ``module:callable``,
            ``nn.Module`` objects, functions ``images (B, 3, H, W) -> embeddings`` or
            :class:`~pfd.attacks.models.outside.AttackerSpec` (model + input convention). Each adds
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
    clock = Clock()
    configs = attack_configs(cfg)  # every attack's settings checked before any work
    if not cfg.release or not cfg.state_dir:
        raise PfdError("pass --release (the released folder) and --state-dir (the publisher's state dir)")
    state = clock.run("load", lambda: open_release_state(cfg.release, cfg.state_dir))
    private_spec = cfg.private or state_private_spec(state)
    if not private_spec:
        raise PfdError(f"no private set: pass --private (the state dir {state.state_dir} records none)")
    own = clock.run("load", lambda: _attackers(cfg, state, progress))
    outside = clock.run("load", lambda: _outside(cfg, list(attackers or []), [a.role for a in own], progress))
    models = own + outside
    _refuse_duplicate_models(own, outside)
    sets = (ReleaseSets(private_spec, state.release, skip_bad=cfg.skip_bad) if private is None else
            OpenedPrivateSets(private, private_spec, state.release, skip_bad=cfg.skip_bad))
    size = models[0].size
    try:
        private0 = clock.run("load", lambda: sets.private(size))
    except PfdError as e:
        if cfg.private or private is not None:
            raise
        # The spec the state dir recorded, not one the auditor typed: a benchmark's in-memory set
        # ("celeba:private+lowres (in memory)") or a folder that moved.
        raise recorded_private_unopenable(state.state_dir, private_spec, e) from None
    source = proxy_sources(state, clock.run("load", lambda: sets.proxies(size)).names, private0,
                           private_spec=private_spec)
    clock.run("load", lambda: _check_recorded_private(state, sets, private_spec))
    inputs = AuditInputs(cfg=cfg, state=state, sets=sets, attackers=models, source=source, labels=private0.labels,
                         private_spec=private_spec, progress=progress, clock=clock, reconstructor=reconstructor)
    return run_audit(inputs, configs, level=level, rule_out=rule_out)


def _check_recorded_private(state: ReleaseState, sets: Any, spec: str) -> None:
    """The private set by content: the pixel digests the state dir recorded, at the run's size."""
    from pfd.release.private_set import check_audited_private_set

    size = state_run_size(state)
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
    for name, cls in CHECKS.items():
        check = cls(configs[name])
        why = check.applicable(inputs)
        if why is not None:
            inputs.skipped[name] = why
            continue
        inputs.results[name] = check.run(inputs)
    rows = [row for r in inputs.results.values() for row in r.rows()]
    verdict = decide(rows, level=level, rule_out=rule_out,
                     skipped={k: v for k, v in inputs.skipped.items() if CHECKS[k].gates and k not in _OPTIONAL},
                     not_audited={k: v for k, v in inputs.skipped.items() if k in _ATTACKS_BY_INPUT})
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
        "summary": rows,
    }
    for result in inputs.results.values():
        for key, value in result.sections().items():
            if isinstance(value, list) and isinstance(data.get(key), list):
                data[key] = data[key] + value  # the reconstructions' links join the proxies'
            elif isinstance(value, dict) and isinstance(data.get(key), dict) and key == "checks":
                data[key] = {**data[key], **value}
            else:
                data[key] = value
    for key in ("linkability", "reconstruction", "attributes", "membership"):  # the layout readers expect
        data.setdefault(key, [] if key == "linkability" else {})
    links = [link for name in ("linkability", "hubness") if name in inputs.results for link in inputs.results[name].links]
    data["per_identity"] = per_identity_risk(links, source, private0.labels, private0.identities)
    data["skipped"] = inputs.skipped
    data["timings"] = clock.seconds
    recon = inputs.results.get("reconstruction")
    grid = {} if state.release is None else _grid(
        inputs.results["linkability"].links[0], sets, inputs.public, source, getattr(recon, "images", None),
        getattr(recon, "pick", np.arange(len(source))), cfg.grid_rows)
    return Scorecard(data=data, grid=grid, results=inputs.results, verdict=verdict)


#: Checks whose absence is a matter of the inputs given, not a gap in the audit (the verdict's text lists the rest).
_OPTIONAL = frozenset({"integrity", "ogp_margin", "judge_competence", "membership", "attributes"})
#: Of those, the attacks that measure something the publisher should know was not measured (issue 34).
_ATTACKS_BY_INPUT = frozenset({"membership", "attributes"})


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
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    clock = Clock()
    configs = attack_configs(cfg)
    st = StateDir.at(state_dir)
    config = tomllib.loads(st.config.read_text(encoding="utf-8")) if st.config.is_file() else {}
    present = lambda p: p if p.is_file() else None  # noqa: E731
    size = tuple(int(v) for v in proxies.shape[-2:])
    state = ReleaseState(release=None, state_dir=st.root,  # type: ignore[arg-type]
                         manifest={"method": method, "image_size": list(size) if size[0] != size[1] else size[0],
                                   "num_classes": int(len(np.unique(source)))},
                         files=[], sources={}, public_model=present(st.public_model), adapted_model=present(st.adapted),
                         config=config, judge_model=present(st.judge_model))
    models = clock.run("load", lambda: _attackers(cfg, state, progress))
    from pfd.release.writer import release_layout

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


def _grid(link: dict[str, Any], sets: ReleaseSets, public: Attacker, source: np.ndarray,
          recon: torch.Tensor | None, pick: np.ndarray, rows: int) -> dict[str, Any]:
    """Images for the grid: the first proxies, (reconstructions,) public VisMatch matches, a source image."""
    proxies, private = sets.proxies(public.size), sets.private(public.size)
    vis = link["vismatch"]
    # Only reconstructed proxies when there are reconstructions; one per source identity, so the
    # grid shows different people.
    pool = pick if recon is not None else np.arange(len(source))
    _, first = np.unique(source[pool], return_index=True)
    order = pool[np.sort(first)[:rows]]
    if order.size == 0:
        return {}
    grid: dict[str, Any] = {
        "proxies": torch.stack([proxies[int(i)][0] for i in order]),
        "matches": torch.stack([private[int(vis.match_index[i])][0] for i in order]),
        "sources": torch.stack([private[int(private.indices_of(int(source[i]))[0])][0] for i in order]),
        "success": vis.success[order].tolist(),
    }
    # A hub (one private photo the nearest for most rows) reads like a wall of links; the grid says so (issue 34).
    photos, counts = np.unique(np.asarray(vis.match_index)[order], return_counts=True)
    if len(order) >= 3 and counts.max() * 2 > len(order):
        photo = int(photos[counts.argmax()])
        grid["hub"] = {"rows": int(counts.max()), "of": int(len(order)),
                       "identity": str(private.identities[int(private.labels[photo])])}
    if recon is not None:
        where = {int(p): j for j, p in enumerate(pick)}
        grid["reconstructions"] = recon[[where[int(i)] for i in order]]
    return grid
