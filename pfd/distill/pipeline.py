"""``pfd distill``: public model -> OGP fine-tuning -> prototypes -> RTA -> release.

Every method (the paper's ablation rows, the raw reference and the baselines) runs this one code
path; what differs is a :class:`~pfd.distill.methods.Method` record (:mod:`pfd.distill.methods`).
``raw`` picks, for every K-means prototype of an identity (eq. 8 on E), the identity's image whose
embedding is nearest to it (each image once): K representative, distinct real images; the
baselines release those same images through their transform (the DP-Pix noise of batch ``b`` is
drawn from ``(baseline.seed, b)``, so resumed and sharded runs stay identical).

Stages read their inputs from the state dir (:mod:`pfd.release.state_dir`) and skip themselves on
``--resume`` when their output exists; RTA batch ``b`` is a pure function of ``(rta.seed, b)``,
the adapted model and P, so a resumed run writes a byte-identical release. Under
``accelerate launch`` fine-tuning is data-parallel (:class:`~pfd.distill.ogp_trainer.OGPTrainer`),
batch ``b`` is distilled by process ``b % world``, and after a barrier the main process writes the
release from all batch files.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.config import DistillConfig, config_to_dict, save_config, validate_config
from pfd.data.faces import check_min_identities, check_min_images
from pfd.data.faceset import FaceSet, to_memory
from pfd.data.shape import same_size, size_text
from pfd.data.sources import open_faces
from pfd.distill.batches import gather_batches, save_batch
from pfd.distill.claim import claim_run
from pfd.distill.delink import PublicView
from pfd.distill.gate import PublicationRefused, audit_config, refusal_message, release_card
from pfd.distill.init_pool import InitPool, PoolCheck, check_disjoint, checked_before, pool_check, record_pool_check
from pfd.distill.methods import check_method
from pfd.distill.ogp import Rotation
from pfd.distill.ogp_trainer import OGPTrainer
from pfd.distill.cf_match import CFTarget
from pfd.distill.lighting import cluster_batches
from pfd.distill.prototype_stage import Prototypes, build_prototypes, private_spatial_targets
from pfd.distill.public import pretrained_public_model
from pfd.distill.rta import ProxyDistiller, proxy_batches
from pfd.distill.summary import build_summary
from pfd.embed import Embedder
from pfd.errors import PfdError
from pfd.io import atomic_torch_save, atomic_write_bytes, atomic_write_json, jsonable
from pfd.memory import StagePeaks
from pfd.nn.checkpoints import check_arch, load_backbone, load_checkpoint, load_head, read_arch, save_checkpoint
from pfd.nn.inversion import batch_generator
from pfd.progress import progress_bar, stage_line, step_line
from pfd.release.format import to_uint8
from pfd.release.private_set import check_private_set, private_set_record, record_private_set
from pfd.release.state_dir import StateDir, check_digest, record_digest
from pfd.release.writer import clear_interrupted_release, write_proxy_map, write_release
from pfd.runtime import stage_runtime
from pfd.audit.rows import rows_to_json
from pfd.audit.engine import audit_in_memory

__all__ = ["DistillResult", "Distillation", "distill"]

log = logging.getLogger(__name__)

@dataclass
class DistillResult:
    """What :func:`distill` produced.

    Attributes:
        release: The release folder.
        state_dir: The private state dir.
        summary: The content of ``state_dir/summary.json``.
        is_main: Whether this is the main process (the one that prints).
    """

    release: Path
    state_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)
    is_main: bool = True


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def _last_metrics(path: Path) -> dict[str, float]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        return {k: v for k, v in json.loads(lines[-1]).items() if k != "step"} if lines else {}
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


class Distillation:
    """One distillation run: owns the accelerator, the state dir and the stage timings.

    Use :func:`distill`; the stages are methods so that tests can run them one by one.

    Args:
        cfg: The resolved configuration.
        faces: The private set (opened from ``cfg.private`` when omitted).
        accelerator: An ``accelerate.Accelerator`` (created when omitted).
        progress: Show progress bars (main process only).
        init_faces: The public photos of ``rta.init = "public"`` (opened from ``rta.init_data`` when omitted).

    Raises:
        PfdError: Before anything is written: unknown method, state dir inside the release, a run
            already present without ``resume`` (or with other settings), an identity with fewer
            than K images.
    """

    def __init__(
        self, cfg: DistillConfig, *, faces: FaceSet | None = None, accelerator: Any | None = None, progress: bool = True,
        init_faces: FaceSet | None = None,
    ) -> None:
        self.method = check_method(cfg)  # the method's record and its own rules
        self.cfg = cfg
        _ = self.baseline  # a bad --epsilon / --dp-cell / --blur-sigma fails before anything is written
        validate_config(cfg)  # every numeric setting, before any work
        self.out = Path(cfg.out).expanduser()
        self.embed_cache = Path(cfg.embed_cache).expanduser() if cfg.embed_cache else None
        self._given = (faces, init_faces)
        # Folders, resume settings, the inputs (after the folder checks, before the lock: nothing is
        # written yet), then one writer per state dir (a lock held by the main process until close()),
        # checked again under it.
        self.claim = claim_run(cfg, check_inputs=self._check_inputs)
        self.acc = stage_runtime(cfg.threads, cfg.mixed_precision, accelerator)
        self.progress = progress
        self.times: dict[str, float] = {}
        self.peaks = StagePeaks()  # resident-memory peak per stage, printed beside its time
        self.skipped: list[str] = []
        self.N = self.faces.num_classes
        # Every process has checked the folders above before the main process writes to them.
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            self.claim.begin()  # 0700 and the marker, before anything else
            save_config(cfg, self.state.config, section="distill")
            if not (cfg.resume and self.state.private_set.is_file()):
                record_private_set(self.state.private_set, self.private_record)
            if self._pool_searched is not None:  # a pass this run searched for, under its own marker
                record_pool_check(self.state.root, self._pool_searched)
        self.acc.wait_for_everyone()

    @property
    def state(self) -> StateDir:
        """The run's state dir (its layout: :class:`~pfd.release.state_dir.StateDir`)."""
        return StateDir.at(self.cfg.state_dir)

    def _check_inputs(self) -> None:
        """What the run reads, checked before anything is written: the private set (sizes, K images
        per identity, one fine-tuning batch, and on ``--resume`` the set the run started from), the
        public checkpoint and the judge (architecture and size), and the public faces the proxies
        start from (``rta.init = "public"``: none of them a private photo)."""
        cfg = self.cfg
        faces, init_faces = self._given
        self.faces = faces if faces is not None else to_memory(
            open_faces(cfg.private, size=cfg.size, min_images=max(1, cfg.min_images), skip_bad=cfg.skip_bad))
        if not same_size(self.faces.size, cfg.size):
            raise PfdError(f"{cfg.private}: images are {size_text(self.faces.size)} but size is {size_text(cfg.size)}; "
                           "set --size consistently")
        k = cfg.rta.ipc
        check_min_images(self.faces, k, need=f"K = {k} proxies per class (rta.ipc) need at least {k}", fix="lower --ipc")
        check_min_identities(self.faces, 2, what="a release", where=cfg.private)
        if len(self.faces) < cfg.ogp.batch_size:
            raise PfdError(f"{cfg.private}: {len(self.faces)} private images, fewer than one fine-tuning batch of "
                           f"{cfg.ogp.batch_size}; lower --ogp-batch-size")
        if cfg.public and not (cfg.resume and self.state.public_model.is_file()):
            # A missing, unreadable or other-size public checkpoint fails here, before a state dir exists.
            check_arch(read_arch(Path(cfg.public).expanduser()), cfg.public, size=cfg.size, backbone=cfg.backbone)
        judge = cfg.release.judge
        if judge and judge != "pretrain":
            check_arch(read_arch(Path(judge).expanduser()), judge, size=cfg.size, role="judge")
        # --resume only with the private set the state dir was made from (issue 27: a renamed
        # identity folder published a proxy map naming the wrong source for every proxy).
        self.private_record = (check_private_set(self.state.private_set, self.faces, spec=cfg.private)
                               if cfg.resume else private_set_record(self.faces))
        self._pool_searched: PoolCheck | None = None  # the pool check this run searched for and passed
        self.init_pool = self._init_pool(init_faces)

    def _init_pool(self, given: FaceSet | None) -> Any:
        """The public photos the proxies start from (``rta.init = "public"``), checked against the
        private set before any work (:func:`pfd.distill.init_pool.check_disjoint`); ``None`` otherwise."""
        cfg = self.cfg
        if cfg.rta.init != "public" or self.method.real_images:
            return None
        pool = to_memory(given if given is not None else open_faces(cfg.rta.init_data, size=cfg.size))
        if not same_size(pool.size, cfg.size):
            raise PfdError(f"--init-data {cfg.rta.init_data}: images are {size_text(pool.size)} but size is "
                           f"{size_text(cfg.size)}; give public faces at the release's size")
        init = InitPool(pool, n_ids=self.faces.num_classes, k=cfg.rta.ipc, seed=cfg.rta.seed)
        key = pool_check(pool, init.used, private_sha=self.private_record["sha256"])
        if cfg.resume and checked_before(self.state.root, key):
            log.info("%s: the initialisation pool passed the copy check before (same pixels, same private set)",
                     cfg.rta.init_data)
        else:
            t0 = time.perf_counter()
            check_disjoint(pool, self.faces, pool_spec=cfg.rta.init_data, private_spec=cfg.private, used=init.used)
            self._pool_searched = key  # recorded once the state dir is claimed
            # Before any stage and slow at scale (10^4 pool photos against 2 x 10^4 private ones): its own line.
            step_line(f"copy check of the initialisation pool ({len(init.used)} photos against {len(self.faces)} "
                      "private ones)", time.perf_counter() - t0)
        return init

    @property
    def rotated(self) -> bool:
        """Whether the method fine-tunes with OGP's rotation (eq. 1-5)."""
        return self.method.rotated

    def close(self, *, failed: bool = False) -> None:
        """Tighten the state dir's modes and release its lock (main process); after a failure
        before the first stage, remove the state dir this run made (:meth:`RunClaim.close`)."""
        self.claim.close(failed=failed)

    def _timed(self, stage: str, t0: float, skipped: bool) -> None:
        self.times[stage] = 0.0 if skipped else time.perf_counter() - t0
        if skipped:
            self.skipped.append(stage)
        else:
            self.peaks.end(stage)
        if self.acc.is_main_process:
            stage_line(stage, self.times[stage], skipped=skipped)
            self.claim.secure()  # 0700/0600 whatever the umask, also if the run is killed later

    # -- stage 0: the public model (and the gate's judge) -----------------------------------
    def public(self) -> Path:
        """Copy the public checkpoint (given, or pretrained and cached) to ``state/public_model.pt``,
        and the judge (``release.judge``, a model no loss sees) to ``state/judge_model.pt``."""

        t0, cfg, dst = time.perf_counter(), self.cfg, self.state.public_model
        skip = cfg.resume and dst.is_file()
        if not skip:
            self._store_model(Path(cfg.public).expanduser() if cfg.public else self._pretrained(cfg.pretrain.seed),
                              dst, backbone=cfg.backbone)
        else:
            check_arch(load_backbone(dst), dst, size=cfg.size, backbone=cfg.backbone)
        judge = cfg.release.judge
        if not judge:
            self.state.judge_model.unlink(missing_ok=True)  # a resumed run may have dropped its judge
        else:  # copied again on --resume too: the judge may have changed (it touches no stage but the gate)
            src = self._pretrained(cfg.release.judge_seed, "pretrain judge") if judge == "pretrain" else Path(judge).expanduser()
            self._store_model(src, self.state.judge_model)
        self._timed("public", t0, skip)
        return dst

    def _pretrained(self, seed: int, desc: str = "pretrain public") -> Path:
        """The recipe's pretrained public model with ``seed`` (trained once, then cached)."""

        cfg = self.cfg
        pre = cfg.pretrain.__class__(**{**config_to_dict(cfg.pretrain), "size": cfg.size, "seed": seed})
        return pretrained_public_model(pre, accelerator=self.acc, progress=self.progress, desc=desc)

    def _store_model(self, src: Path, dst: Path, *, backbone: str = "") -> None:
        """Check ``src`` (architecture, size) and store it at ``dst``: a pfd checkpoint as it is, foreign
        weights (insightface, AdaFace, MobileFaceNet) as a pfd checkpoint of their backbone."""

        model = load_backbone(src)
        check_arch(model, src, size=self.cfg.size, backbone=backbone)
        if self.acc.is_main_process:
            try:
                load_checkpoint(src)  # a pfd checkpoint: keep it as is
                atomic_write_bytes(dst, src.read_bytes())
            except PfdError:
                save_checkpoint(dst, backbone=model, config={"source": str(src)})
            record_digest(self.state.root, dst.name)  # the audit's public model or judge must be this one
        self.acc.wait_for_everyone()

    # -- stage 1: fine-tuning (OGP for pfd) ----------------------------------------------------
    def adapt(self) -> dict[str, float]:
        """Fine-tune from the public model; write ``adapted.pt`` and ``rotation.pt``.

        On ``--resume`` the stage is skipped when ``adapted.pt`` has trained at least the configured
        schedule. A longer schedule (``--ogp-steps``, ``ogp.min_steps``, ``ogp.epochs``) continues
        from the newest OGP checkpoint, and what was computed from the shorter run (prototypes,
        RTA batches, summary) is removed so that it is redone.
        """

        t0, cfg, st = time.perf_counter(), self.cfg, self.state
        trainer = None
        skip = cfg.resume and st.adapted.is_file()
        if skip:
            check_digest(st.root, st.adapted.name)  # a replaced adapted model would steer RTA and play the insider
            trainer = self._ogp_trainer()
            trainer.resume()
            done = int(load_checkpoint(st.adapted).get("step") or 0)
            if done < trainer.total_steps:
                log.info("OGP: adapted model has %d steps, the schedule %d; continuing", done, trainer.total_steps)
                skip = False
                if self.acc.is_main_process:
                    self._drop_after_adapt()
                self.acc.wait_for_everyone()
        if not skip:
            if trainer is None:
                trainer = self._ogp_trainer()
                if cfg.resume:
                    trainer.resume()
            trainer.fit()
            if self.acc.is_main_process:
                record_digest(st.root, st.adapted.name)  # the insider every audit plays must be this model
        if self.acc.is_main_process and not (skip and st.rotation.is_file()):
            self._write_rotation()
        self.acc.wait_for_everyone()
        self._timed("adapt", t0, skip)
        return _last_metrics(st.ogp / "metrics.jsonl")

    def _ogp_trainer(self) -> Any:

        cfg, st = self.cfg, self.state
        return OGPTrainer(
            cfg.ogp,
            faces=self.faces,
            init=st.public_model,
            out=st.ogp,
            final_path=st.adapted,
            size=cfg.size,
            rotate=self.rotated,
            mixed_precision=cfg.mixed_precision,
            workers=cfg.workers,
            record={"distill": config_to_dict(cfg)},
            accelerator=self.acc,
            progress=self.progress,
        )

    def _drop_after_adapt(self) -> None:
        """Remove what a shorter fine-tuning produced (it no longer matches the adapted model)."""
        st = self.state
        for p in (st.rotation, st.prototypes, st.summary, st.audit, *sorted(st.batches.glob("batch_*.pt"))):
            p.unlink(missing_ok=True)

    def _write_rotation(self) -> None:
        """``rotation.pt`` from the adapted checkpoint (M = exp(A − Aᵀ), eq. 1; I without OGP)."""

        ck = load_checkpoint(self.state.adapted)
        dim = int(ck["arch"]["embedding_dim"])
        rot = (ck.get("extra") or {}).get("rotation")
        if self.rotated and rot is None:
            raise PfdError(f"{self.state.adapted}: no rotation stored; delete it and rerun with --resume")
        if rot is None:
            M, A = torch.eye(dim), None
        else:
            r = Rotation(dim)
            r.load_state_dict(rot)
            with torch.no_grad():
                M, A = r().float(), r.generator.detach().float().clone()
        atomic_torch_save({"M": M, "A": A, "method": self.cfg.method}, self.state.rotation)

    def load_adapted(self) -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
        """The adapted backbone and head (eval mode) and M, as every later stage sees them."""

        backbone = load_backbone(self.state.adapted).to(self.acc.device)
        head = load_head(self.state.adapted).to(self.acc.device)
        M = torch.load(self.state.rotation, map_location="cpu", weights_only=True)["M"]
        return backbone, head, M

    # -- stage 2: prototypes (eq. 8) ---------------------------------------------------------
    def prototypes(self, backbone: torch.nn.Module, M: torch.Tensor) -> Prototypes:
        """Per-identity K-means on ``E Mᵀ`` (E for the non-rotating methods) and the private statistics
        RTA matches: ``prototypes.pt`` (:func:`pfd.distill.prototype_stage.build_prototypes`)."""

        t0, cfg, st = time.perf_counter(), self.cfg, self.state
        skip = cfg.resume and st.prototypes.is_file()
        if not skip and self.acc.is_main_process:
            doc = build_prototypes(backbone, M, self.faces, cfg, method=self.method, lighting=self.lighting,
                                   device=self.acc.device, progress=self.progress, embed_cache=self.embed_cache)
            doc.save(st.prototypes)
        self.acc.wait_for_everyone()
        self._timed("prototypes", t0, skip)
        return Prototypes.load(st.prototypes)

    @property
    def lighting(self) -> bool:
        """Whether the lighting lever is on (:mod:`pfd.distill.lighting`; distilled methods only)."""
        return self.cfg.rta.lighting_clusters > 0 and self.method.distilled

    # -- stage 3: proxies (eq. 6-10) ---------------------------------------------------------
    def batches(self, protos: Prototypes | None = None) -> list[np.ndarray]:
        """Prototype rows of every proxy batch (with the lighting lever, one lighting group per batch)."""

        if self.lighting:
            protos = protos if protos is not None else Prototypes.load(self.state.prototypes)
            if protos.lighting is None:
                raise PfdError(f"{self.state.prototypes} holds no lighting groups but rta.lighting_clusters is on; "
                               "rerun without --resume (the prototypes belong to another setting)")
            return cluster_batches(protos.lighting.proto_group, self.cfg.rta.batch_size)
        return proxy_batches(self.N * self.cfg.rta.ipc, self.cfg.rta.batch_size)

    def proxies(self, backbone: torch.nn.Module, head: torch.nn.Module, protos: Prototypes) -> None:
        """Distill (or, for ``raw``, select) this process's unfinished batches into batch files."""

        t0, cfg, st = time.perf_counter(), self.cfg, self.state
        batches = self.batches(protos)
        lighting = protos.lighting if self.lighting else None
        done = st.finished() if cfg.resume else set()
        rank, world = self.acc.process_index, self.acc.num_processes
        mine = [b for b in range(len(batches)) if b % world == rank and b not in done]
        if not mine:  # a finished run resumed, or every batch another process's: no distiller to build
            self.acc.wait_for_everyone()
            self._timed("rta", t0, bool(done))
            return
        pid = protos.proto_identity
        classes = (pid + self.N if self.rotated else pid).numpy()  # eq. 7's internal class
        P = protos.P if self.method.rta else None  # sre2l: no L_RTA
        real = self.method.real_images
        public = self._public_view() if cfg.rta.lambda_delink > 0 and not real and mine else None
        spatial = None
        if cfg.rta.lambda_spatial > 0 and not real and mine:  # a state dir from before stored none: computed here
            spatial = protos.spatial if protos.spatial is not None else private_spatial_targets(
                backbone, self.faces, cfg, self.acc.device)
        rta_cfg = cfg.rta if self.method.bn else replace(cfg.rta, lambda_bn=0.0)  # ncfm: no L_bn
        cf = None
        if self.method.cf and not real and mine:
            cf = CFTarget(protos.embeddings, np.asarray(self.faces.labels), frequencies=cfg.rta.cf_frequencies,
                          sampler_lr=cfg.rta.cf_sampler_lr, seed=cfg.rta.seed, device=self.acc.device)
        distiller = ProxyDistiller(
            backbone, head, P, size=cfg.size, cfg=rta_cfg, device=self.acc.device, cf=cf,
            amp=self.acc.mixed_precision == "bf16", progress=False, public=public,
            init_pool=self.init_pool if not real else None, spatial=spatial,
            insider=self._insider_view(protos) if self.rotated and cfg.rta.lambda_insider > 0 and not real else None,
        )  # fmt: skip
        # Counted in Adam iterations, not batches: a batch can take minutes, and a log (no terminal)
        # gets its progress line every ~30 s from the bar (pfd.progress).
        per_batch = 1 if real else cfg.rta.iterations
        bar = progress_bar(total=len(mine) * per_batch, desc=f"RTA [{rank}]" if world > 1 else "RTA",
                           enabled=self.progress and self.acc.is_local_main_process, unit="batch" if real else "it")
        for b in mine:
            rows = batches[b]
            if real:
                assert protos.raw_index is not None  # a real-image method's prototypes select them
                x = self.real_images(protos.raw_index[rows], batch_index=b)
                hist: dict[str, float] = {}
                bar.update(1)
            else:
                g = int(lighting.proto_group[rows[0]]) if lighting is not None else None  # one group per batch
                res = distiller.distill_batch(
                    rows, classes[rows], batch_index=b, sources=pid[rows].numpy(), on_step=bar.update,
                    bn_targets=lighting.bn[g] if lighting is not None and lighting.bn else None,
                    spatial_targets=lighting.spatial[g] if lighting is not None and lighting.spatial is not None else None,
                )  # fmt: skip
                x, hist = res.proxies, res.summary()
                bar.set_postfix(rta=f"{hist.get('rta_last', 0.0):.3f}", cls=f"{hist.get('cls_last', 0.0):.2f}")
            q = to_uint8(x).transpose(0, 3, 1, 2)  # (B, 3, H, W) uint8, exactly the released pixels
            emb = distiller.embed(torch.from_numpy(q).float().div_(255.0))
            save_batch(st, b, rows=rows, proxies=q, embeddings=emb, history=hist)
        bar.close()
        self.acc.wait_for_everyone()
        self._timed("rta", t0, not mine and bool(done))

    def _embed(self, model: torch.nn.Module, x: Any, cache: Path | None = None) -> torch.Tensor:
        """Normalised embeddings ``(n, D)`` of a face set or an image batch (``cache``: the embedding cache)."""

        return Embedder(model, batch_size=256, device=self.acc.device, cache_dir=cache)(x)

    def _insider_view(self, protos: Prototypes) -> Any:
        """The adapted model's private gallery, for the insider's de-linking term (no model: it reads RTA's embeddings)."""

        labels = torch.as_tensor(np.asarray(self.faces.labels), dtype=torch.int64)
        return PublicView(None, protos.embeddings, labels, self.N)  # type: ignore[arg-type]

    def _public_view(self) -> Any:
        """The public model and its private gallery, for the de-linking term (:mod:`pfd.distill.delink`)."""

        model = load_backbone(self.state.public_model).to(self.acc.device)
        gallery = self._embed(model, self.faces, self.embed_cache)  # (m, D), shared with the gate's public check
        return PublicView(model, gallery, torch.as_tensor(np.asarray(self.faces.labels), dtype=torch.int64), self.N)

    @property
    def baseline(self) -> dict[str, float] | None:
        """A baseline's resolved parameters (``dp-pix``, ``blur``; ``None`` for the other methods)."""
        return self.method.baseline(self.cfg.baseline, self.cfg.size)

    def real_images(self, index: torch.Tensor, *, batch_index: int) -> torch.Tensor:
        """The selected private images ``(B, 3, H, W)``, through the method's transform (the baselines)."""

        x = torch.stack([self.faces[int(i)][0] for i in index])
        if self.method.transform is None:
            return x
        return self.method.transform(x, self.baseline, batch_generator(self.cfg.baseline.seed, batch_index))

    # -- stage 4: the release ----------------------------------------------------------------
    def gate(self, proxies: np.ndarray, source: np.ndarray) -> Any:
        """The audit of the release before it is written (:mod:`pfd.distill.gate`): the same registered
        checks and verdict as ``pfd attack`` and ``pfd card`` on the written release.

        Args:
            proxies: ``(NK, 3, H, W)`` uint8, the released pixels.
            source: ``(NK,)`` each proxy's source identity.
        """


        return audit_in_memory(audit_config(self.cfg, self.state.root), proxies=proxies, source=source,
                               private=self.faces, state_dir=self.state.root, method=self.cfg.method,
                               label_seed=self.cfg.release.label_seed, cache_dir=self.embed_cache)

    def release(self, protos: Prototypes, ogp_losses: dict[str, float]) -> dict[str, Any] | None:
        """Main process: gather every batch file, run the publication gate, then write the release,
        the proxy map and the summary.

        Raises:
            PfdError: A check of the gate failed and ``release.allow_linkable`` is off: nothing is
                published, the state (with ``summary.json`` naming the failed checks) is kept.
        """

        t0, cfg, st = time.perf_counter(), self.cfg, self.state
        summary = None
        refused = None
        if self.acc.is_main_process:
            docs, rows = gather_batches(st, len(self.batches(protos)), len(protos.P))
            proxies = torch.cat([d["proxies"] for d in docs]).numpy()  # (NK, 3, H, W) uint8
            source = protos.proto_identity[rows].numpy()
            audit = self.gate(proxies, source)
            # Every figure of the gate, kept with the state: the benchmark's unit reads it instead of
            # auditing the same pixels again (one audit, computed once).
            atomic_write_json(st.audit, jsonable(audit.data))
            verdict = audit.verdict
            failed = not verdict.publishable
            publish = not failed or cfg.release.allow_linkable
            gate = {"checks": rows_to_json(audit.rows), "verdict": verdict.as_dict(), "passed": not failed, "published": publish,
                    "override": bool(failed and cfg.release.allow_linkable)}  # fmt: skip
            if publish:
                if failed:
                    log.warning("publishing although the audit refused it (--allow-linkable): %s", verdict.text)
                if cfg.resume:
                    clear_interrupted_release(self.out)
                written = write_release(
                    self.out, proxies, source, method=cfg.method, label_seed=cfg.release.label_seed,
                    state_dir=st.root, resume=cfg.resume, run_id=self.claim.run_id,
                    audit=verdict.summary(), avoid_labels=self.faces.identities,
                    card=release_card(cfg, proxies, source, verdict.summary()),
                )  # fmt: skip
                write_proxy_map(
                    st.root, written, proxy_source=source, identities=self.faces.identities,
                    label_seed=cfg.release.label_seed, extra={"method": cfg.method, "prototype_row": rows.tolist()},
                )  # fmt: skip
            self.times["release"] = time.perf_counter() - t0
            self.peaks.end("release")
            summary = build_summary(
                self.cfg, docs=docs, rows=rows, protos=protos, ogp_losses=ogp_losses, times=self.times,
                peaks=self.peaks,
                skipped=self.skipped, num_private=len(self.faces), processes=self.acc.num_processes,
                release=self.out, state_dir=self.state.root,
            )  # fmt: skip
            summary["gate"] = gate
            if st.adapted.is_file():
                steps = int(load_checkpoint(st.adapted).get("step") or 0)
                # Every method fine-tunes; only pfd's fine-tuning is OGP (the others train a plain head).
                summary["counts"]["finetune_steps"] = steps
                if self.rotated:
                    summary["counts"]["ogp_steps"] = steps
            if self.baseline is not None:
                summary["baseline"] = {"method": cfg.method, **self.baseline}
            atomic_write_json(st.summary, summary)
            if not publish:
                refused = refusal_message(verdict, cfg, st.root)
        self.acc.wait_for_everyone()
        if refused is not None:

            raise PublicationRefused(refused, summary)
        return summary


def distill(
    cfg: DistillConfig, *, faces: FaceSet | None = None, accelerator: Any | None = None, progress: bool = True,
    init_faces: FaceSet | None = None,
) -> DistillResult:
    """Run a distillation end to end (or continue one with ``cfg.resume``).

    Args:
        cfg: Resolved settings (see :class:`~pfd.config.DistillConfig`).
        faces: The private set (default: opened from ``cfg.private`` at ``cfg.size``).
        accelerator: An ``accelerate.Accelerator`` (default: one from ``cfg.mixed_precision``).
        progress: Show progress bars.
        init_faces: The public photos of ``rta.init = "public"`` (default: opened from ``rta.init_data``).

    Returns:
        The release and state paths and the summary (also in ``state_dir/summary.json``).

    Raises:
        PfdError: Bad input (before any work), another architecture's public checkpoint, or a
            non-finite loss (finished batches are kept; fix and rerun with ``--resume``).
    """

    run = Distillation(cfg, faces=faces, accelerator=accelerator, progress=progress, init_faces=init_faces)
    try:
        run.public()
        ogp_losses = run.adapt()
        backbone, head, M = run.load_adapted()
        protos = run.prototypes(backbone, M)
        run.proxies(backbone, head, protos)
        summary = run.release(protos, ogp_losses)
    except BaseException as e:
        run.close(failed=not isinstance(e, PublicationRefused))
        raise
    run.close()
    if summary is None:
        summary = json.loads(run.state.summary.read_text(encoding="utf-8"))
    return DistillResult(run.out, run.state.root, summary, run.acc.is_main_process)
