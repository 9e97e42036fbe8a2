"""The release scorecard: run every applicable attack on a release and collect the figures.

``pfd attack --release R --private P --state-dir S --report OUT`` calls :func:`run_scorecard`,
which runs, in order (each only when its inputs exist; otherwise the reason goes to ``skipped``):

1. **Linkability** (PFD paper, "Source-Identity Linkability"): VisMatch and Rank-1 Re-ID of the
   proxies against the private gallery, for each attacker: ``public`` (the public model),
   ``insider`` (the publisher's adapted model, worst case) and every outside attacker the auditor
   brings (``--attacker``: ONNX, TorchScript, ``module:callable`` or a TOML spec, each with its
   input convention and its own distance; :mod:`pfd.attacks.models.outside`).
2. **Reconstruction**: each proxy's public-model embedding is turned back into an image (BN-prior
   inversion through the public model, or a user ``reconstructor``) and the reconstructions are
   linked like the proxies, by every attacker.
3. **Attribute recovery** (PFD paper Tab. 4): a probe on public-model embeddings, fitted on an
   auxiliary labelled set, labels proxies and private images.
4. **Membership of the release**: a downstream model trained on public data + the release, then
   the geometric MIA with private identities as members and held-out identities as non-members.

The proxy -> source map of the state dir is used only to score. The returned :class:`Scorecard`
holds the JSON-ready figures and the few images the match grid shows;
:func:`pfd.attacks.scorecard.report.write_report` writes ``report.json``, ``report.md`` and the plots.
"""

from __future__ import annotations

import os

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from pfd.attacks.attributes.probe import default_aux_spec, probe_attribute_recovery
from pfd.attacks.membership.audit import membership_audit, resolve_head
from pfd.attacks.membership.downstream import downstream_config, train_downstream
from pfd.attacks.linkability.matching import rank1_reid, visual_matching
from pfd.attacks.models.loading import Attacker, load_attacker, load_outside_attacker
from pfd.attacks.models.outside import InputConvention
from pfd.attacks.linkability.reconstruction import BNInversion, Reconstructor, check_reconstructions
from pfd.attacks.scorecard.inputs import (
    ReleaseState,
    open_release_state,
    proxy_sources,
    state_private_spec,
)
from pfd.config import AttackConfig, config_to_dict
from pfd.release.state_dir import StateDir
from pfd.data.faceset import FaceSet
from pfd.release.reader import read_release
from pfd.data.sources import open_faces
from pfd.data.shape import plain_size, same_size, size_text
from pfd.errors import PfdError

__all__ = ["Scorecard", "run_scorecard"]


@dataclass
class Scorecard:
    """What a scorecard run produced.

    Attributes:
        data: JSON-ready figures (see :mod:`pfd.attacks.scorecard.report` for the layout).
        grid: Images of the match grid: ``{"proxies", "matches", "sources", "reconstructions"?}``
            tensors ``(r, 3, H, W)`` and ``"success"`` (r,) bool.
    """

    data: dict[str, Any]
    grid: dict[str, Any] = field(default_factory=dict)


class _Clock:
    """Wall-clock seconds per stage, for the report."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def run(self, stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - t0


class _Sets:
    """The private set and the release, opened once per image size."""

    def __init__(self, private_spec: str, release: Path, *, skip_bad: bool = False) -> None:
        self.private_spec, self.release, self.skip_bad = private_spec, release, skip_bad
        self._private: dict[int, FaceSet] = {}
        self._release: dict[int, FaceSet] = {}

    def private(self, size: int) -> FaceSet:
        if size not in self._private:
            self._private[size] = open_faces(self.private_spec, size=size, skip_bad=self.skip_bad)
        return self._private[size]

    def proxies(self, size: int) -> FaceSet:
        if size not in self._release:
            self._release[size] = read_release(self.release, size=size)
        return self._release[size]


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


def _one_or_three(v: Any) -> Any:
    vals = [float(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    return vals[0] if len(vals) == 1 else tuple(vals)


@dataclass
class _Run:
    """State shared by the stages of one scorecard run."""

    cfg: AttackConfig
    state: ReleaseState
    sets: _Sets
    attackers: list[Attacker]
    source: np.ndarray  # (q,) private label of each proxy
    labels: np.ndarray  # (g,) private labels
    progress: bool
    clock: _Clock = field(default_factory=_Clock)
    emb: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # role -> {"private", "proxies"}
    links: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def public(self) -> Attacker:
        return self.attackers[0]

    def link(self, target: str, attacker: Attacker, query: torch.Tensor, source: np.ndarray) -> None:
        """VisMatch and Re-ID of ``query`` against ``attacker``'s embeddings of the private gallery."""
        gallery, chunk = self.emb[attacker.role]["private"], self.cfg.chunk

        def both() -> dict[str, Any]:
            return {"target": target, "attacker": attacker.role,
                    "vismatch": visual_matching(query, source, gallery, self.labels, chunk=chunk,
                                                metric=attacker.distance),
                    "reid": rank1_reid(query, source, gallery, self.labels, chunk=chunk, metric=attacker.distance)}

        self.links.append(self.clock.run("linkability", both))


def _linkability(run: _Run) -> None:
    """Stage 1: every attacker embeds the private set and the proxies, then links them."""
    for a in run.attackers:
        size = a.input_size(run.state.image_size)
        run.emb[a.role] = run.clock.run("embed", lambda a=a, size=size: {"private": a.embed(run.sets.private(size)),
                                                                          "proxies": a.embed(run.sets.proxies(size))})
        run.link("proxies", a, run.emb[a.role]["proxies"], run.source)


def _subsample(n: int, limit: int, seed: int) -> np.ndarray:
    if limit <= 0 or n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 7]).choice(n, size=limit, replace=False))


def _reconstruction(run: _Run, reconstructor: Reconstructor | None) -> tuple[dict[str, Any], Any, np.ndarray]:
    """Stage 2: reconstruct from public-model embeddings, link the reconstructions with every attacker.

    Returns ``(settings, images (n, 3, H, W) or None, proxy indices reconstructed)``.
    """
    cfg, public = run.cfg, run.public
    pick = _subsample(len(run.source), cfg.recon_limit, cfg.seed)
    if not cfg.reconstruct:
        run.skipped["reconstruction"] = "disabled (--no-reconstruct)"
        return {}, None, pick
    if reconstructor is None and not public.has_batchnorm:
        run.skipped["reconstruction"] = (f"the public model {public.path} has no BatchNorm layers for the BN prior "
                                         "(TorchScript hides them); plug in a reconstructor")
        return {}, None, pick
    if reconstructor is None:
        recon: Reconstructor = BNInversion(
            public.model, size=public.size, iterations=cfg.recon_iterations, batch_size=cfg.recon_batch_size,
            lr=cfg.recon_lr, lambda_bn=cfg.recon_lambda_bn, seed=cfg.seed, device=public.embedder.device,
            progress=run.progress)
        info = recon.settings()
    else:
        recon, info = reconstructor, {"method": getattr(reconstructor, "__name__", type(reconstructor).__name__)}
    targets = run.emb["public"]["proxies"][pick]
    images = run.clock.run("reconstruction", lambda: check_reconstructions(recon(targets), len(pick)))
    if isinstance(recon, BNInversion):
        info["final_cosine_mean"] = float(np.mean([h["cosine"] for h in recon.history]))
    info.update(n=int(len(pick)), of=int(len(run.source)))
    for a in run.attackers:
        run.link("reconstructions", a, run.clock.run("embed", lambda a=a: a.embed(images)), run.source[pick])
    return info, images, pick


def _attributes(run: _Run) -> tuple[str | None, dict[str, Any]]:
    """Stage 3: attribute probe on public-model embeddings of an auxiliary labelled set."""
    cfg, public = run.cfg, run.public
    if not cfg.attributes:
        run.skipped["attributes"] = "disabled (--no-attributes)"
        return None, {}
    aux_spec = cfg.attr_data or default_aux_spec(run.sets.private(public.size))
    if not aux_spec:
        run.skipped["attributes"] = ("no labelled auxiliary set for the attribute probe; pass --attr-data SPEC "
                                     "(an identity folder with attributes.csv)")
        return None, {}
    aux = run.clock.run("load", lambda: open_faces(aux_spec, size=public.size, skip_bad=run.cfg.skip_bad))
    if not aux.attributes:
        run.skipped["attributes"] = f"{aux_spec} has no attributes (no attributes.csv)"
        return aux_spec, {}
    aux_emb = run.clock.run("embed", lambda: public.embed(aux))
    e = run.emb["public"]
    return aux_spec, run.clock.run("attributes", lambda: probe_attribute_recovery(
        aux_emb, aux, e["proxies"], run.source, e["private"], run.labels, permutations=cfg.permutations,
        seed=cfg.seed))


def _membership(run: _Run, private_spec: str) -> dict[str, Any]:
    """Stage 4: train a downstream model on public data + the release, then the geometric MIA."""
    cfg = run.cfg
    if not cfg.public:
        run.skipped["membership"] = "no --public DATA --holdout SPEC given (needed to train and audit a downstream model)"
        return {}
    dcfg = downstream_config(cfg.downstream, public=cfg.public, release=run.state.release,
                             image_size=run.state.image_size or run.public.size, out=Path(cfg.report) / "downstream")
    path, reused = run.clock.run("downstream", lambda: train_downstream(dcfg, progress=run.progress))
    model = load_attacker(path, role="downstream", batch_size=cfg.batch_size, flip=cfg.flip, progress=run.progress)
    kind, s, m, _ = resolve_head(path, None, None, None)
    holdout = open_faces(cfg.holdout, size=model.size, skip_bad=cfg.skip_bad)
    # The public model saw neither the private nor the held-out people: the reference check of
    # pfd.attacks.membership.reference (a LEAKS verdict on groups that differ before training is inconclusive).
    # Its private gallery is already embedded (stage 1), so only the held-out people are new to it.
    ref = run.public
    ref_sets = (run.sets.private(ref.size), holdout if ref.size == model.size
                else open_faces(cfg.holdout, size=ref.size, skip_bad=cfg.skip_bad))
    rep = run.clock.run("membership", lambda: membership_audit(
        model, run.sets.private(model.size), holdout, head=kind, scale=s, margin=m, folds=cfg.mia_folds,
        seed=cfg.seed, permutations=cfg.permutations, reference=ref, reference_sets=ref_sets,
        reference_member_emb=run.emb["public"]["private"]))
    rep.update(members=private_spec, nonmembers=cfg.holdout, downstream=config_to_dict(dcfg), downstream_reused=reused)
    return rep


def run_scorecard(
    cfg: AttackConfig, *, reconstructor: Reconstructor | None = None, attackers: list[Any] | None = None,
    progress: bool = True
) -> Scorecard:
    """Run every applicable attack on a release.

    Args:
        cfg: The attack configuration (release, state dir, private set, options).
        attackers: Outside attackers in addition to ``cfg.attackers``: paths, ``module:callable``,
            ``nn.Module`` objects, functions ``images (B, 3, H, W) -> embeddings`` or
            :class:`~pfd.attacks.models.outside.AttackerSpec` (model + input convention). Each adds
            linkability rows (proxies and reconstructions) beside ``public`` and ``insider``.
        reconstructor: Replaces the built-in BN-prior inversion: ``f(embeddings (n, D) unit rows,
            public-model space) -> images (n, 3, H, W) in [0, 1]`` (e.g. an Arc2Face wrapper).
        progress: Progress bars.

    Returns:
        The :class:`Scorecard` (write it with :func:`pfd.attacks.scorecard.report.write_report`).

    Raises:
        PfdError: For missing or mismatched inputs (release, state dir, private set, models).
    """
    clock = _Clock()
    if not cfg.release or not cfg.state_dir:
        raise PfdError("pass --release (the released folder) and --state-dir (the publisher's state dir)")
    state = clock.run("load", lambda: open_release_state(cfg.release, cfg.state_dir))
    private_spec = cfg.private or state_private_spec(state)
    if not private_spec:
        raise PfdError(f"no private set: pass --private (the state dir {state.state_dir} records none)")
    if bool(cfg.public) != bool(cfg.holdout):
        raise PfdError("the membership test needs both --public DATA and --holdout SPEC (or neither)")
    own = clock.run("load", lambda: _attackers(cfg, state, progress))
    outside = clock.run("load", lambda: _outside(cfg, list(attackers or []), [a.role for a in own], progress))
    attackers = own + outside
    sets = _Sets(private_spec, state.release, skip_bad=cfg.skip_bad)
    size = attackers[0].size
    try:
        private0 = clock.run("load", lambda: sets.private(size))
    except PfdError as e:
        if cfg.private:
            raise
        # The spec the state dir recorded, not one the auditor typed: a benchmark's in-memory set
        # ("celeba:private+lowres (in memory)") or a folder that moved.
        raise PfdError(f"the state dir {state.state_dir} records the private set as {private_spec!r}, which cannot be "
                       f"opened here ({e}); pass --private with those images (a benchmark's set: write it out with "
                       "python benchmarks/privacy_utility.py --export SPEC DIR)") from None
    source = proxy_sources(state, clock.run("load", lambda: sets.proxies(size)).names, private0,
                           private_spec=private_spec)
    run = _Run(cfg=cfg, state=state, sets=sets, attackers=attackers, source=source, labels=private0.labels,
               progress=progress, clock=clock)

    _linkability(run)
    recon_info, recon_images, pick = _reconstruction(run, reconstructor)
    aux_spec, attributes = _attributes(run)
    membership = _membership(run, private_spec)

    data = {
        "format": "pfd-attack-report",
        "version": 1,
        "settings": config_to_dict(cfg),
        "release": {"path": str(state.release), "method": state.method, "image_size": plain_size(state.image_size) if state.image_size else 0,
                    "num_classes": int(state.manifest.get("num_classes", 0)), "num_images": len(source)},
        "private": {"spec": private_spec, "identities": private0.num_classes, "images": len(private0),
                    "source_identities": int(len(np.unique(source)))},
        "attackers": [a.describe() for a in attackers],
        "linkability": [{"target": r["target"], "attacker": r["attacker"],
                         "vismatch": r["vismatch"].as_dict(), "reid": r["reid"].as_dict()} for r in run.links],
        "reconstruction": recon_info,
        "attributes": {"aux": aux_spec, "per_attribute": attributes} if attributes else {},
        "membership": membership,
        "skipped": run.skipped,
        "timings": clock.seconds,
    }
    return Scorecard(data=data, grid=_grid(run.links[0], sets, run.public, source, recon_images, pick, cfg.grid_rows))


def _grid(link: dict[str, Any], sets: _Sets, public: Attacker, source: np.ndarray,
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
    if recon is not None:
        where = {int(p): j for j, p in enumerate(pick)}
        grid["reconstructions"] = recon[[where[int(i)] for i in order]]
    return grid
