"""The stage configurations: one dataclass per stage of ``pfd train``, ``eval``, ``distill``, ``attack``.

Each field is a setting with its default; recipes (:mod:`pfd.config.recipes`) and CLI flags lay
values over them, and :mod:`pfd.config.checks` holds the range rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pfd.data.shape import ImageSizeSetting

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
]

@dataclass
class TrainConfig:
    """Face-recognition training / fine-tuning (``pfd train``).

    Attributes:
        data: Dataset specs trained jointly with disjoint label spaces
            (``synthetic:public``, an identity folder, a RecordIO folder).
        size: Input size: a square side, or ``[H, W]`` (``--size 112x96``) for models that take
            another shape (MobileFaceNet); sides divisible by 16.
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
        head_init: ``random`` (N(0, 0.01²), as insightface) or ``class_means``: each class row starts
            at the normalised mean embedding of its images by the initial backbone (with
            ``init``, a pretrained model: fine-tuning then starts from a head that already
            agrees with the features, instead of gradients from a random head disturbing them).
        threads: CPU intra-op threads of this process (``torch.set_num_threads``); 0 leaves
            torch's setting alone (``OMP_NUM_THREADS`` if set, else one per physical core;
            ``accelerate launch`` divides the cores between its processes).
    """

    data: list[str] = field(default_factory=lambda: ["synthetic:public"])
    size: ImageSizeSetting = 112
    backbone: str = "ir50"
    width: float = 1.0
    embedding_dim: int = 512
    head: str = "arcface"
    scale: float | None = None
    margin: float | None = None
    init: str | None = None
    head_init: str = "random"
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
        lambda_delink: Weight of pfd's de-linking term :func:`pfd.distill.delink.delink_loss`
            (not in the paper; 0 = the paper's eq. 10): the public model an outside attacker
            holds ranks each proxy's source identity at a rank drawn uniformly at random, so that
            neither "nearest" nor "farthest" names it. The gate then needs a judge
            (``release.judge``), a model no loss has seen.
        init: What the proxies start from: ``"noise"`` (the paper: Gaussian noise around mid-grey,
            ``init_std``) or ``"public"``: public face photos of ``init_data``
            (:mod:`pfd.distill.init_pool`; a pool that shares a photo with the private set is refused).
        init_data: The public faces ``init = "public"`` starts from: an identity folder, RecordIO or
            ``synthetic:`` spec, at the proxies' image size.
        lambda_spatial: Weight of the spatial feature statistics ``L_sp``
            (:mod:`pfd.nn.spatial_stats`; G-VBSM/EDC's patch statistics, not in the paper): per
            BatchNorm layer, the mean and variance of each region of a ``spatial_grid`` grid, matched
            to the private set's domain-level values. 0 = the paper's eq. 10.
        spatial_grid: Regions per side of those statistics.
        source_ranks: ``"uniform"`` (pfd's default, rotating methods only): each prototype's
            cosine to its source's template is moved to the de-linking term's target (one rank per
            class, jittered as other identities vary across the class) among its cosines to the
            other identities (:func:`pfd.distill.prototypes.uniform_source_ranks`), so that the
            insider (the adapted model) ranks each proxy's source like any identity, per proxy and
            per class;
            ``"kmeans"``: the paper's eq. 8 prototypes as they are (whose sources the insider
            finds as the identities most orthogonal to their proxies).
        lighting_clusters: pfd's lighting lever (:mod:`pfd.distill.lighting`; not in the paper; 0 =
            off, eq. 6 against the domain-level running statistics): the private images are grouped
            into at most this many lighting conditions, each class's K prototypes span its source's
            groups, and each proxy matches the BatchNorm (and spatial) statistics of its own group.
        lighting_min_identities: Identities every lighting group pools at least (smaller groups are
            merged: group statistics are never those of a few people).
        lighting_grid: Regions per side of the lighting descriptor (mean luminance per region).
        lambda_cf: Weight of the characteristic-function matching term (``--method ncfm`` only;
            :mod:`pfd.distill.cf_match`; NCFM's 300).
        cf_frequencies: Frequencies at which the characteristic functions are compared per
            iteration (NCFM's ``num_freqs``, 4096).
        cf_sampler_lr: Adam learning rate of NCFM's frequency-sampling network (its
            ``lr_sampling_net``, 1e-3); 0: fresh Gaussian frequencies every iteration.
        lambda_insider: Weight of the de-linking term in the adapted model's own space
            (:mod:`pfd.distill.delink`; rotating methods only; 0 = the paper's eq. 10): the
            proxies' sources at the same uniform ranks for the insider.
        lambda_tv: Weight of the total-variation prior :func:`pfd.nn.image_prior.total_variation`
            (DeepInversion's R_TV; not in the paper; 0 = eq. 10): the proxies' neighbouring pixels
            pulled together, so that what encodes a class is not a high-frequency pattern that only
            the adapted model reads.
        downsample: Low-resolution parameterisation (IDC, Kim et al. 2022): each proxy is optimised
            at ``size / downsample`` per side and upsampled bilinearly (:class:`pfd.nn.inversion.ImageInversion`);
            1 = the paper's full-resolution pixels. For a private set photographed at low
            resolution: its proxies then hold no detail finer than the photos do.
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
    lambda_delink: float = 0.0
    init: str = "noise"
    init_data: str = ""
    lambda_spatial: float = 0.0
    spatial_grid: int = 4
    source_ranks: str = "uniform"
    lambda_insider: float = 10.0
    lighting_clusters: int = 0
    lighting_min_identities: int = 5
    lighting_grid: int = 4
    lambda_cf: float = 300.0
    cf_frequencies: int = 4096
    cf_sampler_lr: float = 1e-3
    lambda_tv: float = 0.0
    downsample: int = 1


#: The licence a release's dataset card states unless ``release.license`` says otherwise: non-commercial, as
#: most face-recognition training sets; the publisher decides (an identifier of the hubs' licence lists).
DEFAULT_LICENSE = "cc-by-nc-4.0"


@dataclass
class ReleaseConfig:
    """The published proxy set.

    Attributes:
        label_seed: Seed of the arbitrary label permutation (independent of every other seed).
        allow_linkable: Write the release even when the audit refuses it (OGP below its margin
            target, or proxies that pfd's own attacks link above chance). The baselines of a
            benchmark need it; a publisher should not. The audit's level is not a setting: the
            gate, ``pfd attack`` and ``pfd card`` decide at the one level of :mod:`pfd.audit.verdict`.
        judge: A face model that no loss of the run sees, whose VisMatch and Re-ID join the gate:
            a checkpoint at the release's image size, ``"pretrain"`` (a second model pretrained
            like the demo's public one, with seed ``judge_seed``), or empty (no judge; then
            ``rta.lambda_delink`` must be 0).
        judge_seed: Seed of the pretrained judge (``judge = "pretrain"``); it must differ from the
            public model's.
        license: The licence identifier the release's dataset card (``README.md``) states
            (:data:`pfd.release.dataset_card.DEFAULT_LICENSE`, non-commercial, unless the publisher
            says otherwise: ``cc-by-4.0``, ``mit``, ``other``, ...).
    """

    label_seed: int = 0
    allow_linkable: bool = False
    judge: str = ""
    judge_seed: int = 1
    license: str = DEFAULT_LICENSE


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
            the obfuscation baselines ``dp-pix`` and ``blur`` (``baseline``), or the distillation
            baseline ``ncfm`` (:mod:`pfd.distill.methods` lists them).
        out: Release folder (published).
        state_dir: Private state folder (never published; mode 0700; not inside ``out``).
        resume: Skip finished stages and RTA batches found in ``state_dir``.
        size: Image size, ``S`` or ``[H, W]`` (must match the public model; the pretrained one is
            built for it; ``pfd distill --public CKPT`` without ``--size`` takes the checkpoint's).
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
    size: ImageSizeSetting = 112
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
    """``pfd attack``: the release scorecard's shared settings; each attack's own are its table.

    Every registered attack (:mod:`pfd.audit.contract`) owns a config dataclass; its settings come
    from the recipe's ``[attack.<name>]`` table (``[attack.reconstruction]``, ``[attack.membership]``,
    ...) and its ``pfd attack`` options, and are collected here in :attr:`attacks` by name.

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
        batch_size: Embedding batch size.
        flip: Embed with flip fusion (image + mirror), insightface style.
        grid_rows: Proxies shown in the match grid.
        seed: Seed.
        attackers: Outside attacker models, each adding linkability rows: ``.onnx``, TorchScript,
            ``.toml`` attacker spec or ``module:callable`` (:mod:`pfd.attackers.outside`).
        attacker_size: Input side of the outside attackers (0: declared by the model, else 112).
        attacker_mean: Their input mean on the 0..255 scale, one value or R, G, B (insightface: 127.5).
        attacker_std: Their input std on the 0..255 scale (insightface: 127.5).
        attacker_resize: ``stretch`` or ``pad`` (letterbox, as dlib / face-api).
        attacker_distance: ``cosine`` or ``euclidean``.
        attacker_channels: ``rgb`` or ``bgr``.
        (A ``.toml`` attacker spec carries its own convention; these apply to the other kinds.)
        attacks: Each attack's own settings by name (its ``[attack.<name>]`` table).
    """

    TABLES_FIELD: ClassVar[str] = "attacks"

    release: str = ""
    private: str = ""
    state_dir: str = ""
    public_model: str = ""
    public_model_size: int = 0
    insider: bool = True
    report: str = "report"
    skip_bad: bool = False
    batch_size: int = 256
    flip: bool = False
    grid_rows: int = 8
    seed: int = 0
    attackers: list[str] = field(default_factory=list)
    attacker_size: int = 0
    attacker_mean: list[float] = field(default_factory=lambda: [127.5])
    attacker_std: list[float] = field(default_factory=lambda: [127.5])
    attacker_resize: str = "stretch"
    attacker_distance: str = "cosine"
    attacker_channels: str = "rgb"
    attacks: dict[str, dict[str, Any]] = field(default_factory=dict)


