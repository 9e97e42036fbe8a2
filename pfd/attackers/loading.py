"""Attacker models: any face-recognition model an auditor holds, as an image -> embedding map.

:func:`load_attacker` loads every kind; the last three go through :mod:`pfd.attackers.outside`,
with an input convention (insightface's by default):

* pfd / insightface / AdaFace **checkpoints** and pfd-convention **TorchScript** (below);
* **ONNX** files (``*.onnx``, run with onnxruntime);
* **TOML attacker specs** (``*.toml``: a model plus its input convention);
* **Python entry points** ``module:callable`` (and, from Python, modules and functions);
  :func:`load_outside_attacker` also takes TorchScript under an outside convention
  (``pfd attack --attacker``).

The built-in kinds:

* **Checkpoints** (:func:`pfd.nn.checkpoints.load_backbone`): pfd checkpoints, insightface
  ``model.pt`` / ``backbone.pth`` and AdaFace ``.ckpt`` files (``weights_only=True``). The input
  size and embedding dimension come from the architecture.
* **TorchScript** files (``torch.jit.save``), for models pfd cannot build itself. Loading runs
  TorchScript code from the file (TorchScript, not arbitrary Python), so only use files you trust.

Input convention, the same for every attacker: a batch ``(B, 3, H, W)`` of float32 **RGB** values
in **[0, 1]**; the model applies its own normalisation (pfd backbones do ``(x - 0.5) / 0.5``, and
the RGB->BGR flip for AdaFace weights, inside ``forward``) and returns ``(B, D)`` features, which
the :class:`~pfd.embed.Embedder` L2-normalises. A TorchScript model must follow this convention;
its side ``S`` comes from, in order: the ``size`` argument (``--public-model-size``), an extra file
``pfd.json`` holding ``{"size": S}`` saved with the model, or an integer attribute ``size`` /
``input_size`` of the scripted module::

    torch.jit.save(torch.jit.script(net), "net.ts", _extra_files={"pfd.json": '{"size": 112}'})

Images of another side are resized (bilinear, antialiased) to ``S`` before the forward pass, as an
attacker would do.
"""

from __future__ import annotations

import copy

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from pfd.data.faceset import FaceSet
from pfd.embed import Embedder
from pfd.attackers.torchscript import first_line, is_torchscript, load_torchscript
from pfd.data.shape import canonical_size, image_hw, same_size, size_text
from pfd.errors import PfdError
from pfd.attackers.outside import (INSIGHTFACE, AttackerSpec, ConventionAdapter, InputConvention, load_outside_model,
                                   read_attacker_spec)
from pfd.attackers.outside import is_entry_point
from pfd.nn.checkpoints import load_checkpoint
import logging
import threading
from pfd.nn.checkpoints import load_backbone

__all__ = ["Attacker", "load_attacker", "load_outside_attacker", "is_torchscript", "resize_images", "checkpoint_head", "StoredHead",
           "check_not_constant"]

#: Seconds a model may take on its first batch of 2 images before a warning names it.
PROBE_PATIENCE = 60.0

def resize_images(x: torch.Tensor, size: Any) -> torch.Tensor:
    """Resize ``(n, 3, h, w)`` images to ``size`` (``S`` or ``(H, W)``; bilinear, antialiased); no-op if equal."""
    hw = image_hw(size)
    if tuple(x.shape[-2:]) == hw:
        return x
    return F.interpolate(x, size=hw, mode="bilinear", antialias=True, align_corners=False).clamp_(0.0, 1.0)


@dataclass
class Attacker:
    """A model held by an attacker, ready to embed faces.

    Attributes:
        role: Who holds it in the threat model (``"public"``, ``"insider"``, ``"model"``, ...).
        path: The file it came from.
        kind: ``"checkpoint"`` or ``"torchscript"``.
        model: The module (eval mode).
        size: Input size: ``S``, or ``(H, W)`` for a non-square model (MobileFaceNet).
        embedding_dim: D.
        embedder: Batched embedding with the model (L2-normalised, float32, CPU output; raw
            features for a Euclidean attacker).
        distance: How the attacker compares embeddings: ``"cosine"`` or ``"euclidean"``.
        convention: The input convention of an outside attacker (``None`` for pfd's own kinds).
    """

    role: str
    path: str
    kind: str
    model: nn.Module
    size: int | tuple[int, int]
    embedding_dim: int
    embedder: Embedder
    distance: str = "cosine"
    convention: InputConvention | None = None

    def embed(self, x: FaceSet | torch.Tensor, *, cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
        """``(n, D)`` unit embeddings of a FaceSet (opened at :attr:`size`) or an image tensor.

        Tensors of another side are resized to :attr:`size` first. ``cache_dir`` serves (and
        stores) this call's embeddings from the embedding cache (:class:`~pfd.embed.Embedder`).

        Raises:
            PfdError: If a FaceSet's image size is not :attr:`size`, or the model fails on the batch.
        """
        if self.convention is not None:
            pass  # an outside attacker's adapter resizes (stretch or letterbox) from any size itself
        elif isinstance(x, torch.Tensor):
            x = resize_images(x, self.size)
        elif not same_size(x.size, self.size):
            raise PfdError(f"{self.path}: model takes {size_text(self.size)} faces but the set is {size_text(x.size)}; "
                           f"open it with size={self.size}")
        embedder = self.embedder
        if cache_dir is not None:
            embedder = copy.copy(embedder)
            embedder.cache_dir = Path(cache_dir)
        try:
            out = embedder(x)
        except RuntimeError as e:  # a TorchScript model that rejects the input
            raise PfdError(f"{self.path} ({self.role}): model failed on {size_text(self.size)} images ({first_line(e)}); "
                           f"check {self.size_flag} and the input convention in docs/attacks.md") from None
        except PfdError as e:
            if str(e).startswith("Embedder:"):  # NaN / inf: say which model
                raise PfdError(f"{self.path} ({self.role}): {str(e).removeprefix('Embedder: ')}") from None
            raise
        check_not_constant(out, where=f"{self.path} ({self.role})", images=x)
        return out

    @property
    def size_flag(self) -> str:
        """The option that sets this attacker's input size."""
        return {"public": "--public-model-size"}.get(self.role, "--attacker-size" if self.convention is not None
                                                     else "--model-size")

    def input_size(self, release_size: Any) -> Any:
        """The size to open faces at for this attacker: its own, or for an outside attacker (whose
        adapter stretches or letterboxes) the release's, so that ``resize = "pad"`` sees the real aspect."""
        return self.size if self.convention is None or not release_size else release_size

    @property
    def has_batchnorm(self) -> bool:
        """Whether the model has BatchNorm layers whose statistics a BN prior can match."""
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None
                   for m in self.model.modules())

    def describe(self) -> dict[str, object]:
        """JSON-ready description (role, path, kind, size, embedding_dim, arch when known)."""
        d: dict[str, object] = {"role": self.role, "path": self.path, "kind": self.kind, "size": self.size,
                                "embedding_dim": self.embedding_dim, "distance": self.distance}
        if self.convention is not None:
            d["convention"] = asdict(self.convention)
        arch = getattr(self.model, "arch", None)
        if isinstance(arch, dict):
            d["arch"] = dict(arch)
        return d


def check_not_constant(emb: torch.Tensor, *, where: str, images: Any = None) -> None:
    """Refuse embeddings that are the same for every image (a broken model, not a clean release).

    An attacker that returns all-zero or constant embeddings links nothing, and its rows read
    "≈ chance" exactly as an unlinkable release would. Three or more different images with one
    embedding mean the model ignores its input (identical images may share one, of course).

    Args:
        emb: ``(n, D)`` embeddings.
        where: The model, for the message.
        images: The images embedded (a tensor or a FaceSet), to tell identical inputs apart.

    Raises:
        PfdError: Naming the model.
    """
    if emb.ndim != 2 or emb.shape[0] < 3:
        return
    e = emb.detach().float()
    spread = float((e - e[0]).abs().max())
    if spread <= 1e-6 * max(1.0, float(e.abs().max())) and not _identical_inputs(images, e.shape[0]):
        what = "all-zero" if float(e.abs().max()) == 0 else "the same"
        raise PfdError(f"{where}: returns {what} embedding for all {e.shape[0]} images, whatever the face; a broken "
                       "attacker model would read as a clean release: check the model file and its input convention")


def _identical_inputs(images: Any, n: int) -> bool:
    """Whether the embedded images are all one image (checked on the first, middle and last)."""
    if images is None:
        return False
    pick = sorted({0, n // 2, n - 1})
    try:
        x = [images[i] if isinstance(images, torch.Tensor) else images.load(i) for i in pick]
    except Exception:  # noqa: BLE001 - cannot tell: assume they differ
        return False
    return all(torch.equal(x[0], y) for y in x[1:])


_SIZE_WORDS = ("size", "shape", "dimension", "expected", "mat1", "mismatch", "got input", "invalid dimensions")


def _probe_dim(model: nn.Module, size: Any, path: Path, *, size_flag: str = "--model-size") -> int:
    """Run a (2, 3, H, W) batch through the model; return D or raise a one-line PfdError.

    A line is logged first (a model that hangs is then named in the log), and a warning when it has
    not answered after :data:`PROBE_PATIENCE` seconds.
    """
    log = logging.getLogger("pfd.attacks")
    h, w = image_hw(size)
    log.info("probing %s with a (2, 3, %d, %d) batch", path, h, w)
    timer = threading.Timer(PROBE_PATIENCE, lambda: log.warning(
        "%s has not answered a batch of 2 images in %.0f s; if it hangs, stop pfd (Ctrl-C) and check the model",
        path, PROBE_PATIENCE))
    timer.daemon = True
    timer.start()
    try:
        with torch.inference_mode():
            out = model(torch.full((2, 3, h, w), 0.5))
    except Exception as e:  # noqa: BLE001 - the model rejected the input; say what it needs
        why = first_line(e)
        if any(word in str(e).lower() for word in _SIZE_WORDS):
            raise PfdError(f"{path}: model does not accept (B, 3, {h}, {w}) images in [0, 1] ({why}); "
                           f"pass the model's input size with {size_flag}") from None
        raise PfdError(f"{path}: model raised {type(e).__name__} on a batch of 2 images ({why}); fix the model or "
                       "its entry point") from None
    finally:
        timer.cancel()
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 2:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise PfdError(f"{path}: model returned {shape} for a batch of 2 images; an attacker model must return "
                       "(B, D) embeddings")
    return int(out.shape[1])


def load_attacker(
    path: str | os.PathLike,
    *,
    role: str = "model",
    size: int | None = None,
    batch_size: int = 256,
    flip: bool = False,
    device: str | torch.device | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> Attacker:
    """Load an attacker model from a checkpoint or a TorchScript file.

    Args:
        path: pfd / insightface / AdaFace checkpoint, or a TorchScript archive (pfd convention:
            RGB in [0, 1], the model normalises); or an ``.onnx`` file, a ``.toml`` attacker spec,
            ``module:callable``, a module or a function, loaded by :func:`load_outside_attacker`
            with the insightface convention unless the spec says otherwise.
        role: Label of the attacker in reports.
        size: Input side. TorchScript: overrides the declared size. Checkpoints: must equal the
            architecture's size (a check, since the fc layer fixes it).
        batch_size: Embedding batch size.
        flip: Fuse each embedding with that of the mirrored image (insightface evaluation).
        device: Where to embed (default: CUDA if available).
        cache_dir: Embedding cache folder (see :class:`~pfd.embed.Embedder`); ``None`` disables.
        progress: Show embedding progress bars.

    Returns:
        The :class:`Attacker`.

    Raises:
        PfdError: Missing or unreadable file, a size that does not fit the model, or a model that
            does not map ``(B, 3, H, W)`` images to ``(B, D)`` features.
    """
    if not isinstance(path, (str, os.PathLike)) or is_entry_point(path) or Path(path).suffix.lower() in (".onnx", ".toml"):
        return load_outside_attacker(path, role=None if role == "model" else role, size=size, batch_size=batch_size,
                                     flip=flip, device=device, progress=progress)
    p = Path(path)
    if not p.is_file():
        raise PfdError(f"{p}: no such model file; pass a pfd/insightface/AdaFace checkpoint, a TorchScript, "
                       "ONNX or .toml attacker file, or module:callable")
    if is_torchscript(p):
        model, side = load_torchscript(p, size)
        kind = "torchscript"
    else:

        model = load_backbone(p)
        side = canonical_size(model.arch["size"])
        kind = "checkpoint"
        if size is not None and not same_size(size, side):
            raise PfdError(f"{p}: this {model.arch['name']} takes {size_text(side)} images, not {size_text(size)}; drop the size "
                           "option or pass the matching model")
    dim = _probe_dim(model, side, p, size_flag="--public-model-size" if role == "public" else "--model-size")
    embedder = Embedder(model, batch_size=batch_size, flip=flip, device=device, cache_dir=cache_dir, progress=progress)
    return Attacker(role=role, path=str(p), kind=kind, model=model, size=side, embedding_dim=dim, embedder=embedder)


def load_outside_attacker(
    spec: Any,
    *,
    role: str | None = None,
    convention: Any = None,
    size: int | None = None,
    batch_size: int = 256,
    flip: bool = False,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Attacker:
    """Load an outside attacker: ONNX, TorchScript, ``module:callable``, a module/function or a TOML spec.

    Args:
        spec: An :class:`~pfd.attackers.outside.AttackerSpec`, a ``.toml`` spec, an ``.onnx`` or
            TorchScript file, ``"module:callable"``, an ``nn.Module`` or a function
            ``images -> embeddings``.
        role: Row label (default: the spec's name, else the file stem / callable name).
        convention: :class:`~pfd.attackers.outside.InputConvention` for a spec that does not carry
            its own (a TOML spec or an ``AttackerSpec`` does); default insightface's.
        size: Input side, overriding the convention's (``--model-size``).
        batch_size: Embedding batch size.
        flip: Flip-fused embeddings.
        device: Where to embed (ONNX always runs on the CPU through onnxruntime).
        progress: Progress bars.

    Returns:
        The :class:`Attacker`; ``kind`` is ``onnx``, ``torchscript`` or ``python``.

    Raises:
        PfdError: Unreadable model or spec, a size that contradicts the model's declared one, or
            a model that does not return ``(B, D)`` embeddings.
    """
    if isinstance(spec, (str, os.PathLike)) and Path(spec).suffix.lower() == ".toml":
        spec = read_attacker_spec(spec)
    if not isinstance(spec, AttackerSpec):
        spec = AttackerSpec(model=spec, convention=convention or INSIGHTFACE)
    raw, kind, declared, desc = load_outside_model(spec.model)
    conv = spec.convention.checked(desc)
    if size:
        conv = replace(conv, size=(int(size), int(size)))
    if conv.size is not None and declared is not None and kind == "onnx" and tuple(conv.size) != tuple(declared):
        raise PfdError(f"{desc}: the ONNX graph takes {declared[0]}x{declared[1]} images, not "
                       f"{conv.size[0]}x{conv.size[1]}; drop the size option or re-export the model")
    conv = replace(conv, size=conv.size or declared or (112, 112))
    model = ConventionAdapter(raw, conv)
    side = max(conv.size)  # type: ignore[arg-type]
    name = role or spec.name or (Path(str(spec.model)).stem if kind != "python" else desc.rsplit(":", 1)[-1])
    dim = _probe_dim(model, side, Path(desc), size_flag="--attacker-size" if role is None or role != "model" else "--model-size")
    embedder = Embedder(model, batch_size=batch_size, flip=flip, device="cpu" if kind == "onnx" else device,
                        progress=progress, normalize=conv.distance == "cosine")
    return Attacker(role=name, path=desc, kind=kind, model=model, size=side, embedding_dim=dim, embedder=embedder,
                    distance=conv.distance, convention=conv)


class StoredHead(TypedDict, total=False):
    """What a pfd checkpoint says of its margin head (the keys it stores)."""

    kind: str
    scale: float
    margin: float | None


def checkpoint_head(path: str | os.PathLike) -> StoredHead | None:
    """The kind, scale and margin of the margin head stored in a pfd checkpoint, else ``None``.

    Used to default the grey-box MIA statistics to the head the model was trained with.
    """

    if not isinstance(path, (str, os.PathLike)) or is_entry_point(path) or Path(path).suffix.lower() in (".onnx", ".toml"):
        return None
    if is_torchscript(path):
        return None
    try:
        ck = load_checkpoint(path)
    except PfdError:
        return None
    head = ck.get("head")
    if not isinstance(head, dict) or "kind" not in head:
        return None
    return StoredHead(**{k: head[k] for k in ("kind", "scale", "margin") if k in head})
