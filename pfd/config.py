"""One dataclass per stage, TOML recipes that load into them, and the resolved-config writer.

A recipe is a TOML file with one table per stage (``[train]``, ``[ogp]``, ``[rta]``, ...).
Values resolve in this order, later winning: dataclass defaults < recipe table < CLI flags.
The resolved configuration is written next to every output (``config.toml``) so that a run can
be reproduced and a checkpoint knows the architecture that built it.

Example:
    >>> cfg = build_config(TrainConfig, load_recipe("demo").get("pretrain", {}), {"epochs": 2})
    >>> save_config(cfg, "runs/x/config.toml", section="train")
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from pfd.errors import PfdError
from pfd.io import atomic_write_text

__all__ = [
    "TrainConfig",
    "EvalConfig",
    "OGPConfig",
    "RTAConfig",
    "ReleaseConfig",
    "BaselineConfig",
    "DistillConfig",
    "AttackConfig",
    "ATTACK_DOWNSTREAM_DEFAULTS",
    "RECIPES_DIR",
    "recipe_path",
    "load_recipe",
    "build_config",
    "config_to_dict",
    "dump_toml",
    "save_config",
    "validate_config",
]

C = TypeVar("C")

#: recipes/ next to the package (a source checkout or an editable install).
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


# --------------------------------------------------------------------------------------------
# Stage configurations
# --------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Face-recognition training / fine-tuning (``pfd train``).

    Attributes:
        data: Dataset specs trained jointly with disjoint label spaces
            (``synthetic:public``, an identity folder, a RecordIO folder).
        size: Square input size in pixels (divisible by 16).
        backbone: Registered backbone name (``ir18``, ``ir50``, ``adaface_ir50``, ...).
        width: Channel-width multiplier (1.0 = the published architecture).
        embedding_dim: Embedding dimension D.
        head: Margin head (``arcface``, ``cosface``, ``adaface``, ``magface``).
        scale: Logit scale s (empty: the head's published default, 64).
        margin: Margin m (empty: the head's default; MagFace's margin depends on the norm).
        init: Checkpoint to fine-tune from (pfd, insightface or AdaFace format).
        epochs: Passes over the data.
        max_steps: Stop after this many optimiser steps (overrides epochs when set).
        batch_size: Global batch size.
        lr: Peak SGD learning rate.
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        warmup_epochs: Linear warm-up length in epochs (fractions allowed).
        schedule: ``cosine`` or ``poly`` decay after warm-up.
        grad_clip: Max global gradient norm (0 disables).
        mixed_precision: ``auto`` (bf16 on CUDA, none on CPU), ``no``, ``bf16`` or ``fp16``.
        checkpoint_every: Save a resumable checkpoint every N steps.
        out: Output folder (checkpoints, config.toml, metrics).
        seed: Seed for initialisation, shuffling and augmentation.
        workers: DataLoader worker processes.
        min_images: Drop identities with fewer images than this.
        flip: Random horizontal flip augmentation.
        skip_bad: Skip (and list) unreadable images and unusable entries of identity folders
            instead of stopping at the first one.
        threads: CPU intra-op threads of this process (``torch.set_num_threads``); 0 leaves
            torch's setting alone (``OMP_NUM_THREADS`` if set, else one per physical core;
            ``accelerate launch`` divides the cores between its processes).
    """

    data: list[str] = field(default_factory=lambda: ["synthetic:public"])
    size: int = 112
    backbone: str = "ir50"
    width: float = 1.0
    embedding_dim: int = 512
    head: str = "arcface"
    scale: float | None = None
    margin: float | None = None
    init: str | None = None
    epochs: int = 20
    max_steps: int | None = None
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: float = 1.0
    schedule: str = "cosine"
    grad_clip: float = 5.0
    mixed_precision: str = "auto"
    checkpoint_every: int = 1000
    out: str = "runs/train"
    seed: int = 0
    workers: int = 0
    min_images: int = 2
    flip: bool = True
    skip_bad: bool = False
    threads: int = 0


@dataclass
class EvalConfig:
    """Verification evaluation (``pfd eval``).

    Attributes:
        model: Checkpoint to evaluate.
        pairs: A ``pairs.txt`` (with ``data`` as its image root), an insightface ``.bin``, or
            empty to generate pairs from ``data``.
        data: Dataset spec for image lookup or pair generation.
        num_pairs: Genuine pairs to generate (the same number of impostors is added).
        folds: Cross-validation folds for accuracy.
        flip: Fuse embeddings of the image and its mirror (insightface evaluation).
        batch_size: Embedding batch size.
        seed: Pair-generation seed.
        out: Where to write ``eval.json`` (empty: next to the model).
        skip_bad: Skip (and list) unreadable images of an identity-folder ``data``.
    """

    model: str = ""
    pairs: str = ""
    data: str = "synthetic:test"
    num_pairs: int = 3000
    folds: int = 10
    flip: bool = True
    batch_size: int = 256
    seed: int = 0
    out: str = ""
    skip_bad: bool = False


@dataclass
class OGPConfig:
    """Orthogonal Geometry Preservation, eq. 1-5 of the PFD paper.

    Attributes:
        head: Margin head for the 2N-class classifier (AdaFace in the paper).
        scale: Head scale s.
        margin: Head margin m.
        rep_margin: Cosine margin m of L_rep (eq. 3).
        lambda_rep: Weight of L_rep in eq. 5.
        lambda_iso: Weight of L_iso in eq. 5.
        epochs: Fine-tuning epochs over the private set.
        max_steps: Schedule length in steps when set (replaces ``epochs`` and ``min_steps``).
        min_steps: Floor on the schedule length in steps. The rotation learns per step, not per
            epoch: a private set of 300 images at batch 64 gets 4 steps an epoch, and 35 steps
            left half of the embeddings above the repulsion margin (not in the paper, which
            fine-tunes on large sets).
        target_below_margin: Share of private embeddings with ``|cos(M e, e)| < rep_margin``
            (eq. 3) that OGP must reach. Below it after the schedule, training continues with
            the schedule stretched to twice its length, until the target or ``step_cap``; the
            publication gate refuses a release below it (not in the paper).
        step_cap: Most OGP steps the extension may reach (0: never extend beyond the schedule).
        batch_size: Images per step (each contributes e and Me, so the head sees 2x).
        lr: Peak SGD learning rate of backbone and head.
        rotation_lr: Learning rate of the skew-symmetric generator A (0: same as lr).
        momentum: SGD momentum.
        weight_decay: SGD weight decay (not applied to A).
        warmup_epochs: Linear warm-up length.
        grad_clip: Max gradient norm (0 disables).
        init_scale: Std of the random skew-symmetric start of A (M never starts at I).
        flip: Random horizontal flip of the private images (seeded per step).
        checkpoint_every: Save a resumable OGP checkpoint every N steps (0: only the final model).
        seed: Seed.
    """

    head: str = "adaface"
    scale: float = 64.0
    margin: float = 0.4
    rep_margin: float = 0.2
    lambda_rep: float = 1.0
    lambda_iso: float = 1.0
    epochs: int = 10
    max_steps: int | None = None
    min_steps: int = 200
    target_below_margin: float = 0.95
    step_cap: int = 2000
    batch_size: int = 64
    lr: float = 0.1
    rotation_lr: float = 0.0
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: float = 1.0
    grad_clip: float = 5.0
    init_scale: float = 0.1
    flip: bool = True
    checkpoint_every: int = 200
    seed: int = 0


@dataclass
class RTAConfig:
    """Relational Topology Alignment distillation, eq. 6-10 of the PFD paper.

    Attributes:
        ipc: Proxy images per class K (the publication budget; K-means prototypes per identity).
        iterations: Adam steps per proxy batch.
        batch_size: Proxies optimised together (rows of eq. 9 decompose over proxies).
        lr: Adam learning rate (0.25 as in SRe2L).
        betas: Adam betas.
        lambda_rta: Weight of L_RTA in eq. 10.
        lambda_bn: Weight of L_bn in eq. 10.
        first_bn_multiplier: Extra weight on the first BN layer's statistics (SRe2L uses 10).
        crop_scale: Random-resized-crop scale range applied every iteration.
        flip: Random horizontal flip every iteration.
        shift: Max random translation in pixels (jitter) every iteration.
        kmeans_seed: Seed for per-identity K-means.
        kmeans_n_init: K-means restarts per identity (the best inertia wins).
        init_std: Std of the Gaussian noise the proxies start from, around mid-grey 0.5 in
            [0, 1] pixel units (SRe2L's ``randn`` in normalised space is ~0.225 in pixels).
        seed: Seed for the noise initialisation and augmentation (each batch draws from
            ``(seed, batch_index)``, so batches are independent and resumable).
    """

    ipc: int = 10
    iterations: int = 1000
    batch_size: int = 100
    lr: float = 0.25
    betas: tuple[float, float] = (0.5, 0.9)
    lambda_rta: float = 1.0
    lambda_bn: float = 0.01
    first_bn_multiplier: float = 10.0
    crop_scale: tuple[float, float] = (0.5, 1.0)
    flip: bool = True
    shift: int = 4
    kmeans_seed: int = 0
    kmeans_n_init: int = 10
    init_std: float = 0.2
    seed: int = 0


@dataclass
class ReleaseConfig:
    """The published proxy set.

    Attributes:
        label_seed: Seed of the arbitrary label permutation (independent of every other seed).
        allow_linkable: Write the release even when the publication gate's checks fail (OGP
            below its margin target, or proxies that pfd's own attacks link above chance). The
            baselines of a benchmark need it; a publisher should not.
    """

    label_seed: int = 0
    allow_linkable: bool = False


@dataclass
class BaselineConfig:
    """The image-obfuscation baselines ``dp-pix`` and ``blur`` (:mod:`pfd.distill.baselines`).

    Both release the same K real images per identity as ``raw``, transformed. Sizes are in pixels
    of the release; 0 picks the default for the image size (stated for 112 px and scaled).

    Attributes:
        epsilon: DP-Pix privacy budget ε (Laplace scale ``255 m / (b² ε)`` per cell mean).
        cell: DP-Pix cell side b (0: 16 px at 112 px, scaled linearly with the image size).
        pixels: DP-Pix m, pixels in which neighbouring images may differ (0: 16 at 112 px,
            scaled with the area, so that ``m / b²`` and hence the noise stay the same).
        blur_sigma: Gaussian blur σ (0: ``S / 14``, 8 px at 112 px; kernel ``2⌈3σ⌉ + 1``).
        seed: Seed of the DP-Pix noise (batch ``b`` draws from ``(seed, b)``).
    """

    epsilon: float = 1.0
    cell: int = 0
    pixels: int = 0
    blur_sigma: float = 0.0
    seed: int = 0


@dataclass
class DistillConfig:
    """``pfd distill``: OGP -> prototypes -> RTA -> release.

    Attributes:
        private: Private dataset spec (identity folder, RecordIO, ``synthetic:private``).
        public: Public checkpoint to start from (pfd, insightface or AdaFace); empty: pretrain
            (or reuse a cached) model with ``pretrain``.
        method: ``pfd``, ``rta-only``, ``sre2l`` or ``raw`` (Table 3 rows and the raw reference),
            or the obfuscation baselines ``dp-pix`` and ``blur`` (``baseline``).
        out: Release folder (published).
        state_dir: Private state folder (never published; mode 0700; not inside ``out``).
        resume: Skip finished stages and RTA batches found in ``state_dir``.
        size: Image size (must match the public model; the pretrained one is built for it).
        backbone: Expected backbone name of the public checkpoint (empty: any); another one is
            an error.
        min_images: Drop identities with fewer images than this first (0: keep all; every
            identity left needs at least K = ``rta.ipc`` images, else an error).
        skip_bad: Skip (and list) unreadable images of an identity-folder ``private`` set.
        mixed_precision: ``auto`` (bf16 on CUDA, none on CPU), ``no``, ``bf16`` or ``fp16``.
        workers: DataLoader worker processes for fine-tuning.
        threads: CPU intra-op threads of each process (``torch.set_num_threads``); 0 leaves
            torch's default (``OMP_NUM_THREADS`` or one per core). On a CPU shared with other
            jobs, 1 avoids OpenMP threads waiting on each other.
        embed_cache: Folder for cached embeddings of the private set (the prototypes stage's
            and the publication gate's, :class:`pfd.embed.Embedder` keys them by model weights
            and image content); empty: none. Worth it when several runs share a model and a
            private set (e.g. the methods of a benchmark that share one fine-tune). The files
            are private state: keep the folder with ``state_dir``; it may not lie inside ``out``.
        pretrain: Training config of the public model when ``public`` is empty (a recipe's
            ``[train]`` table, overridden by ``[distill.pretrain]``).
        ogp: OGP stage (also the fine-tuning of the non-rotating methods).
        rta: RTA stage.
        release: Release stage.
        baseline: Settings of the ``dp-pix`` and ``blur`` methods.
    """

    private: str = "synthetic:private"
    public: str = ""
    method: str = "pfd"
    out: str = "release"
    state_dir: str = "state"
    resume: bool = False
    size: int = 112
    backbone: str = ""
    min_images: int = 0
    skip_bad: bool = False
    mixed_precision: str = "auto"
    workers: int = 0
    threads: int = 0
    embed_cache: str = ""
    pretrain: TrainConfig = field(default_factory=TrainConfig)
    ogp: OGPConfig = field(default_factory=OGPConfig)
    rta: RTAConfig = field(default_factory=RTAConfig)
    release: ReleaseConfig = field(default_factory=ReleaseConfig)
    baseline: BaselineConfig = field(default_factory=BaselineConfig)


#: The downstream model of the release membership test: tiny (CPU minutes, not hours); any key can
#: be overridden in ``[attack.downstream]``. ``size = 0`` means the release's image size.
ATTACK_DOWNSTREAM_DEFAULTS: dict[str, Any] = {
    "backbone": "ir18", "width": 0.25, "embedding_dim": 128, "size": 0, "epochs": 5, "batch_size": 64,
    "lr": 0.1, "warmup_epochs": 0.5, "checkpoint_every": 0, "min_images": 1,
}


@dataclass
class AttackConfig:
    """``pfd attack``: the release scorecard.

    Attributes:
        release: Release folder to score.
        private: The private dataset the release came from (empty: the ``private`` spec in the
            state dir's ``config.toml``).
        state_dir: The publisher's state dir (proxy->source map, public and adapted models).
        public_model: Attacker's public model (pfd/insightface/AdaFace checkpoint or TorchScript);
            empty: ``state_dir/public_model.pt``.
        public_model_size: Input side of a TorchScript public model (0: declared by the file).
        insider: Also attack with the publisher's adapted model (``state_dir/adapted.pt``).
        report: Output folder for report.json, report.md and plots.
        skip_bad: Skip (and list) unreadable images of identity-folder sets (private, public,
            holdout, attribute data) instead of stopping at the first one.
        public: Public training data of the downstream membership test (empty: skip it).
        holdout: Same-domain held-out identities (non-members) for the membership test.
        attr_data: Auxiliary labelled set the attacker fits the attribute probe on (empty: the
            synthetic ``public`` split for a synthetic private set, else skip).
        attributes: Run attribute recovery.
        batch_size: Embedding batch size.
        chunk: Gallery chunk size for streamed top-1 search.
        flip: Embed with flip fusion (image + mirror), insightface style.
        reconstruct: Run the reconstruction attack.
        recon_iterations: Adam steps of the BN-prior inversion per batch.
        recon_batch_size: Images inverted together.
        recon_lr: Peak learning rate of the inversion.
        recon_lambda_bn: Weight of the BatchNorm prior.
        recon_limit: Reconstruct at most this many proxies (a seeded sample; 0 = all).
        permutations: Permutation draws of the attribute chance levels.
        mia_folds: Cross-validation folds of the fused membership classifier.
        grid_rows: Proxies shown in the match grid.
        downstream: :class:`TrainConfig` settings of the downstream model (``[attack.downstream]``),
            laid over :data:`ATTACK_DOWNSTREAM_DEFAULTS`; ``data`` and ``out`` are set by the
            scorecard.
        seed: Seed.
        attackers: Outside attacker models, each adding linkability rows: ``.onnx``, TorchScript,
            ``.toml`` attacker spec or ``module:callable`` (:mod:`pfd.attacks.outside`).
        attacker_size: Input side of the outside attackers (0: declared by the model, else 112).
        attacker_mean: Their input mean on the 0..255 scale, one value or R, G, B (insightface: 127.5).
        attacker_std: Their input std on the 0..255 scale (insightface: 127.5).
        attacker_resize: ``stretch`` or ``pad`` (letterbox, as dlib / face-api).
        attacker_distance: ``cosine`` or ``euclidean``.
        attacker_channels: ``rgb`` or ``bgr``.
        (A ``.toml`` attacker spec carries its own convention; these apply to the other kinds.)
    """

    release: str = ""
    private: str = ""
    state_dir: str = ""
    public_model: str = ""
    public_model_size: int = 0
    insider: bool = True
    report: str = "report"
    skip_bad: bool = False
    public: str = ""
    holdout: str = ""
    attr_data: str = ""
    attributes: bool = True
    batch_size: int = 256
    chunk: int = 4096
    flip: bool = False
    reconstruct: bool = True
    recon_iterations: int = 100
    recon_batch_size: int = 64
    recon_lr: float = 0.1
    recon_lambda_bn: float = 0.01
    recon_limit: int = 0
    permutations: int = 1000
    mia_folds: int = 5
    grid_rows: int = 8
    downstream: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    attackers: list[str] = field(default_factory=list)
    attacker_size: int = 0
    attacker_mean: list[float] = field(default_factory=lambda: [127.5])
    attacker_std: list[float] = field(default_factory=lambda: [127.5])
    attacker_resize: str = "stretch"
    attacker_distance: str = "cosine"
    attacker_channels: str = "rgb"


def validate_config(cfg: Any) -> Any:
    """Check every numeric (and choice) setting of a stage config before any work starts.

    :func:`build_config` calls it for the top-level config; the stages call it again for
    configs built in Python. The rules are in :mod:`pfd.config_checks`.

    Args:
        cfg: A config dataclass.

    Returns:
        ``cfg`` (unchanged).

    Raises:
        PfdError: ``"--ipc (rta.ipc) = 0: must be at least 1"``: the flag, the setting, the value.
    """
    from pfd.config_checks import check_config

    check_config(cfg)
    return cfg


# --------------------------------------------------------------------------------------------
# Recipes
# --------------------------------------------------------------------------------------------


def recipe_path(name: str | os.PathLike) -> Path:
    """Resolve a recipe given as a path or as a name in ``recipes/``.

    Raises:
        PfdError: If neither exists; the message lists the recipes available.
    """
    p = Path(name)
    if p.is_file():
        return p
    cand = RECIPES_DIR / (p.name if p.suffix == ".toml" else f"{p.name}.toml")
    if cand.is_file():
        return cand
    known = sorted(q.stem for q in RECIPES_DIR.glob("*.toml")) if RECIPES_DIR.is_dir() else []
    raise PfdError(
        f"{name}: no such recipe file; give a path to a .toml file or one of: {', '.join(known) or '(none found)'}"
    )


def load_recipe(name: str | os.PathLike) -> dict[str, Any]:
    """Read a TOML recipe into a dict of stage tables.

    Raises:
        PfdError: If the file is missing or is not valid TOML.
    """
    path = recipe_path(name)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise PfdError(f"{path}: invalid TOML ({e}); fix the recipe file") from None


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a TOML/CLI value to the annotated field type, with a clear error."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except (PfdError, TypeError, ValueError):
                continue
        raise PfdError(f"{where}: cannot use {value!r} as {tp}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise PfdError(f"{where}: expected a table, got {value!r}")
        return build_config(tp, value, where=where, validate=False)
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise PfdError(f"{where}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise PfdError(f"{where}: expected {len(args)} values, got {value!r}")
            return tuple(_coerce(v, a, where) for v, a in zip(value, args))
        inner = args[0] if args else Any
        seq = [_coerce(v, inner, where) for v in value]
        return tuple(seq) if origin is tuple else seq
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise PfdError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise PfdError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise PfdError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise PfdError(f"{where}: expected an integer, got {value!r}") from None
    if tp is float:
        if isinstance(value, bool):
            raise PfdError(f"{where}: expected a number, got {value!r}")
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise PfdError(f"{where}: expected a number, got {value!r}") from None
        if math.isnan(out):
            raise PfdError(f"{where}: NaN is not a valid setting")
        return out
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise PfdError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def build_config(cls: type[C], *layers: Mapping[str, Any] | None, where: str | None = None, validate: bool = True) -> C:
    """Build a stage dataclass from defaults overlaid with recipe/CLI layers.

    Later layers win; ``None`` values in a layer mean "not given" (so unset CLI flags do not
    override the recipe). Nested dataclass fields take nested tables and merge key by key.

    Args:
        cls: The config dataclass.
        *layers: Mappings from field name to value, lowest priority first.
        where: Name used in error messages (defaults to the class name).
        validate: Check the values (:func:`validate_config`); nested tables are checked with
            their parent.

    Returns:
        An instance of ``cls``.

    Raises:
        PfdError: On an unknown key (listing the valid ones), a value of the wrong type or out
            of range.
    """
    where = where or cls.__name__
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    merged: dict[str, Any] = {}
    for layer in layers:
        if not layer:
            continue
        for key, value in layer.items():
            name = key.replace("-", "_")
            if name not in fields:
                raise PfdError(
                    f"{where}: unknown setting {key!r}; valid settings are {', '.join(sorted(fields))}"
                )
            if value is None:
                continue
            if dataclasses.is_dataclass(hints[name]) and isinstance(value, Mapping):
                # Start from the field's own default (which may differ from the nested class's
                # defaults, e.g. a default_factory that sets a backbone), then overlay.
                prev = merged.get(name)
                if prev is None:
                    f = fields[name]
                    prev = f.default_factory() if f.default_factory is not dataclasses.MISSING else {}  # type: ignore[misc]
                if dataclasses.is_dataclass(prev):
                    prev = config_to_dict(prev)
                merged[name] = {**prev, **value}
            else:
                merged[name] = value
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in merged.items()}
    cfg = cls(**kwargs)
    return validate_config(cfg) if validate else cfg


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A dataclass (nested ones too) as plain dict of TOML-compatible values."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, Mapping):
            return {str(k): conv(x) for k, x in v.items()}
        return v

    return conv(cfg)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{esc}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(data: Mapping[str, Any], *, _prefix: str = "") -> str:
    """Serialise a nested dict of scalars, lists and tables as TOML (``None`` values omitted)."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    for k, v in data.items():
        if v is None:
            continue
        if isinstance(v, Mapping) and v:
            tables.append((k, v))
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    out = "\n".join(lines)
    for k, v in tables:
        name = f"{_prefix}{k}"
        body = dump_toml(v, _prefix=f"{name}.")
        out += ("\n\n" if out else "") + f"[{name}]" + ("\n" + body if body else "")
    return out.strip("\n") + "\n"


def save_config(cfg: Any, path: str | os.PathLike, *, section: str | None = None) -> None:
    """Write the resolved configuration as TOML (atomically).

    Args:
        cfg: A config dataclass (or a dict of them).
        path: Destination file, usually ``<out>/config.toml``.
        section: Table name to nest the config under (e.g. ``"train"``), so the file is itself
            a valid recipe.
    """
    data = config_to_dict(cfg)
    if section:
        data = {section: data}
    atomic_write_text(path, dump_toml(data))
