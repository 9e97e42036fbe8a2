"""Embedder: a face-recognition model turned into L2-normalised embeddings, batched and cached.

Input is either a :class:`~pfd.data.faceset.FaceSet` or a float tensor ``(n, 3, H, W)`` of RGB
values in ``[0, 1]``; the model applies its own normalisation inside ``forward`` (see
``pfd.nn.iresnet``). Output is always ``float32 (n, D)`` on the CPU with unit rows
(raw rows with ``normalize=False``).

Flip fusion follows insightface's evaluation (arcface_torch ``eval/verification.py``, ``test``):
the *raw* (un-normalised) outputs of the image and of its horizontal mirror are summed and the sum
is normalised once, ``e = norm(φ(x) + φ(flip(x)))``: an image whose features have a larger norm
counts more, which is what insightface's published accuracies use.

Caching (``cache_dir``): the embeddings of one call are stored under the sha256 of everything that
determines them, so a hit is never stale:

* the model: class / TorchScript code, ``model.arch`` and every ``state_dict`` tensor (name,
  dtype, shape, bytes), re-hashed on each call so that weights changed in place miss the cache;
* the settings that change numbers: ``flip`` and the precision (fp32 on CPU, bf16 autocast on
  CUDA); the batch size does not (the model runs in eval mode, samples are independent);
* the input: for a tensor its dtype, shape and bytes; for a FaceSet its type, image size and,
  per sample, the stable name and a content fingerprint. The fingerprint is the source's own
  ``content_digest(i)`` when it offers one (a file-backed source can hash its file bytes plus its
  decode settings, which is cheaper than decoding), otherwise the sha256 of the decoded pixels.

Without ``content_digest`` a miss therefore decodes the images twice (once to hash, once to
embed); a hit decodes once and skips every forward pass. Files are written with
:func:`pfd.io.atomic_torch_save` and read with ``weights_only=True``; an unreadable cache file is
recomputed and overwritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from pfd.data.faceset import FaceSet, FaceSubset
from pfd.errors import PfdError
from pfd.io import atomic_torch_save
from pfd.progress import progress_bar

__all__ = ["Embedder", "default_device", "class_centers", "hash_state_dict"]

log = logging.getLogger(__name__)

#: Bump when anything that changes the numbers for the same key changes (invalidates caches).
_CACHE_VERSION = "pfd.embed/1"


def default_device() -> torch.device:
    """CUDA device of this process (``LOCAL_RANK`` under accelerate/torchrun) if any, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device("cpu")


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw bytes of a tensor of any dtype (bf16 included), in C order, on the CPU."""
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def hash_state_dict(h: "hashlib._Hash", state_dict: dict[str, torch.Tensor]) -> None:
    """Feed every tensor of ``state_dict`` (name, dtype, shape, bytes; sorted by name) into ``h``.

    Args:
        h: A hashlib hash object.
        state_dict: A model's ``state_dict()``.
    """
    for key, t in sorted(state_dict.items()):
        h.update(f"{key} {t.dtype} {tuple(t.shape)}".encode())
        h.update(_tensor_bytes(t))


class Embedder:
    """Maps images to L2-normalised embeddings with a face-recognition model.

    Args:
        model: An ``nn.Module`` (e.g. ``pfd.nn.backbones.create_backbone(...)``), a TorchScript
            module, or any callable mapping ``(B, 3, H, W)`` images in ``[0, 1]`` to ``(B, D)``
            features. Modules are moved to ``device`` (in place, as ``Module.to`` does), switched
            to eval mode during a call and restored to their previous per-submodule modes after.
        batch_size: Images per forward pass.
        flip: Fuse with the horizontal mirror, insightface style (see module docstring).
        device: Where to run; default :func:`default_device`. On CUDA the forward uses bf16
            autocast and channels_last; elsewhere plain fp32.
        cache_dir: Folder for cached embeddings (see module docstring); ``None`` disables it.
        workers: DataLoader worker processes for FaceSet input.
        progress: Show a tqdm bar.
        normalize: L2-normalise the output rows (default); False returns the raw features (flip-fused
            when ``flip``), e.g. for an attacker that compares embeddings by Euclidean distance.

    Example:
        >>> emb = Embedder(backbone, flip=True)(faces)   # (len(faces), 512), unit rows
    """

    def __init__(
        self,
        model: Callable[[torch.Tensor], torch.Tensor],
        *,
        batch_size: int = 256,
        flip: bool = False,
        device: str | torch.device | None = None,
        cache_dir: str | os.PathLike | None = None,
        workers: int = 0,
        progress: bool = False,
        normalize: bool = True,
    ) -> None:
        if batch_size < 1:
            raise PfdError(f"Embedder: batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.batch_size = int(batch_size)
        self.flip = bool(flip)
        self.normalize = bool(normalize)  # False: raw features, for attackers that match by Euclidean distance
        self.device = torch.device(device) if device is not None else default_device()
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.workers = int(workers)
        self.progress = bool(progress)
        self.last_cache_hit: bool | None = None  #: whether the latest call was served from cache

    # -- public -------------------------------------------------------------------------------
    def __call__(self, x: FaceSet | torch.Tensor) -> torch.Tensor:
        """Embed a FaceSet or an image tensor.

        Args:
            x: A :class:`FaceSet`, or a float tensor ``(n, 3, H, W)`` with values in ``[0, 1]``.

        Returns:
            ``float32 (n, D)`` on the CPU, rows of unit L2 norm.

        Raises:
            PfdError: Wrong input shape/dtype/range, a model that returns non-finite or
                wrongly-shaped features, or ``cache_dir`` with a model that has no weights to hash.
        """
        n = self._check_input(x)
        self.last_cache_hit = None
        path = None
        if self.cache_dir is not None:
            path = self.cache_dir / f"{self.cache_key(x)}.pt"
            cached = self._load_cached(path, n)
            if cached is not None:
                self.last_cache_hit = True
                return cached
            self.last_cache_hit = False
        out = self._embed(x, n)
        if path is not None:
            atomic_torch_save({"embeddings": out, "version": _CACHE_VERSION}, path)
        return out

    def cache_key(self, x: FaceSet | torch.Tensor) -> str:
        """The sha256 (hex) under which the embeddings of ``x`` are cached (see module docstring)."""
        h = hashlib.sha256()
        h.update(_CACHE_VERSION.encode())
        self._hash_model(h)
        precision = "bf16" if self.device.type == "cuda" else "fp32"
        settings = {"flip": self.flip, "device": self.device.type, "precision": precision}
        if not self.normalize:  # only when set, so that existing cache keys stay valid
            settings["normalize"] = False
        h.update(json.dumps(settings).encode())
        if isinstance(x, torch.Tensor):
            h.update(f"tensor {x.dtype} {tuple(x.shape)}".encode())
            h.update(_tensor_bytes(x))
        else:
            self._hash_faces(h, x)
        return h.hexdigest()

    # -- input --------------------------------------------------------------------------------
    @staticmethod
    def _check_input(x: Any) -> int:
        if isinstance(x, torch.Tensor):
            if x.ndim != 4 or x.shape[1] != 3 or not x.is_floating_point():
                raise PfdError(
                    f"Embedder: expected a float tensor (n, 3, H, W) in [0, 1], got {x.dtype} {tuple(x.shape)}; "
                    "convert uint8 images with x.float() / 255"
                )
            return int(x.shape[0])
        if isinstance(x, FaceSet):
            return len(x)
        raise PfdError(f"Embedder: expected a FaceSet or an image tensor, got {type(x).__name__}")

    def _batches(self, x: FaceSet | torch.Tensor) -> Iterator[torch.Tensor]:
        """CPU (or pinned) image batches ``(b, 3, H, W)`` in sample order."""
        if isinstance(x, torch.Tensor):
            for i in range(0, x.shape[0], self.batch_size):
                yield x[i : i + self.batch_size]
            return
        loader = DataLoader(
            x,
            batch_size=self.batch_size,
            shuffle=False,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
        )
        for images, _labels in loader:
            yield images

    # -- model --------------------------------------------------------------------------------
    def _hash_model(self, h: "hashlib._Hash") -> None:
        state_dict = getattr(self.model, "state_dict", None)
        if not callable(state_dict):
            raise PfdError(
                f"Embedder: cannot cache embeddings of a {type(self.model).__name__} without a state_dict; "
                "pass an nn.Module / TorchScript module or drop cache_dir"
            )
        name = getattr(self.model, "original_name", None) or type(self.model).__qualname__
        h.update(f"model {type(self.model).__module__}.{name}".encode())
        code = getattr(self.model, "code", None)  # TorchScript: the forward itself
        if isinstance(code, str):
            h.update(code.encode())
        arch = getattr(self.model, "arch", None)
        h.update(json.dumps(arch, sort_keys=True, default=str).encode())
        hash_state_dict(h, state_dict())

    def _prepare_model(self) -> list[tuple[Any, bool]]:
        """Move the model to the device, switch to eval; return the modes to restore."""
        m = self.model
        if not isinstance(m, torch.nn.Module):
            return []
        modes = [(mod, mod.training) for mod in m.modules()]
        if self.device.type == "cuda":
            m.to(self.device, memory_format=torch.channels_last)
        else:
            m.to(self.device)
        m.eval()
        return modes

    @staticmethod
    def _restore(modes: list[tuple[Any, bool]]) -> None:
        # Per submodule: Module.train(flag) would overwrite deliberately frozen submodules.
        for mod, flag in modes:
            mod.training = flag

    # -- embedding ----------------------------------------------------------------------------
    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        """Raw features ``(B, D)`` float32 of a batch already on the device."""
        if self.device.type == "cuda":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = self.model(x)
        else:
            out = self.model(x)
        if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != x.shape[0]:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise PfdError(f"Embedder: model returned {shape} for a batch of {x.shape[0]}; expected (B, D) features")
        return out.float()

    def _embed(self, x: FaceSet | torch.Tensor, n: int) -> torch.Tensor:
        modes = self._prepare_model()
        chunks: list[torch.Tensor] = []
        lo = hi = None  # running min/max of the pixels, on the device; checked once (no per-batch sync)
        try:
            with torch.inference_mode(), progress_bar(total=n, unit="img", enabled=self.progress, desc="embed") as bar:
                for images in self._batches(x):
                    images = images.to(self.device, torch.float32, non_blocking=True)  # (b, 3, H, W)
                    if self.device.type == "cuda":
                        images = images.contiguous(memory_format=torch.channels_last)
                    feats = self._forward(images)  # (b, D)
                    if self.flip:
                        feats = feats + self._forward(images.flip(3))  # raw sum, normalised below
                    chunks.append(F.normalize(feats, dim=1) if self.normalize else feats)
                    b_lo, b_hi = torch.aminmax(images)
                    lo = b_lo if lo is None else torch.minimum(lo, b_lo)
                    hi = b_hi if hi is None else torch.maximum(hi, b_hi)
                    bar.update(images.shape[0])
        finally:
            self._restore(modes)
        if not chunks:
            return torch.zeros(0, 0)
        if lo.item() < -1e-6 or hi.item() > 1 + 1e-6:
            raise PfdError(
                f"Embedder: pixel values span [{lo.item():.3g}, {hi.item():.3g}], expected [0, 1]; "
                "pass raw RGB images, models normalise inside forward"
            )
        out = torch.cat(chunks).cpu()  # (n, D) float32
        if not torch.isfinite(out).all():
            raise PfdError("Embedder: model produced NaN/inf features (diverged checkpoint?); check the weights")
        return out

    # -- cache --------------------------------------------------------------------------------
    def _hash_faces(self, h: "hashlib._Hash", faces: FaceSet) -> None:
        # By content only (names and per-image digests, or pixels), never by the set's class: a set
        # opened from its spec and the same images held by a run (a subset, a filtered view) share entries.
        h.update(f"faceset size={faces.size} n={len(faces)}".encode())
        digest = _digest_fn(faces)
        if digest is not None:
            h.update(b"\0digests")
            for i in range(len(faces)):
                h.update(f"\0{faces.name(i)}\0{digest(i)}".encode())
            return
        # No cheap fingerprint: hash the decoded pixels themselves (same loader as embedding).
        h.update(b"\0pixels")
        i = 0
        for images in self._batches(faces):
            for img in images:
                h.update(f"\0{faces.name(i)}\0".encode())
                h.update(_tensor_bytes(img))
                i += 1

    @staticmethod
    def _load_cached(path: Path, n: int) -> torch.Tensor | None:
        if not path.exists():
            return None
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
            emb = blob["embeddings"]
            if not isinstance(emb, torch.Tensor) or emb.dtype != torch.float32 or emb.shape[0] != n:
                raise ValueError(f"unexpected content {type(emb).__name__}")
            return emb
        except Exception as e:  # noqa: BLE001 - any unreadable cache file is simply recomputed
            log.warning("%s: unreadable embedding cache (%s); recomputing", path, e)
            return None


def _digest_fn(faces: FaceSet) -> Callable[[int], str] | None:
    """The per-sample ``content_digest`` of ``faces`` (following subsets to their parent), if any."""
    if isinstance(faces, FaceSubset):
        parent = _digest_fn(faces.parent)
        if parent is None:
            return None
        idx = np.asarray(faces.indices)
        return lambda i: parent(int(idx[i]))
    fn = getattr(faces, "content_digest", None)
    return fn if callable(fn) else None


def class_centers(emb: torch.Tensor, labels: Any, num_classes: int) -> torch.Tensor:
    """Normalised mean embedding of every class ``(C, D)`` (summed in float64; a class without
    samples keeps a zero row): the identity prototypes of RTA's original space and the rows of a
    margin head started at its classes (``TrainConfig.head_init = class_means``).

    Args:
        emb: Unit-norm embeddings ``(n, D)`` (an :class:`Embedder`'s output).
        labels: Class of each embedding ``(n,)`` in ``[0, C)``.
        num_classes: ``C``.
    """
    y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
    sums = torch.zeros(num_classes, emb.shape[1], dtype=torch.float64).index_add_(0, y, emb.double())  # (C, D)
    return F.normalize(sums, dim=1).float()
