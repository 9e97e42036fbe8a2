"""Checkpoints: pfd's own format, and the public insightface / AdaFace backbone weights.

pfd's format is one ``torch.save`` of a dict holding only tensors and plain Python values, so that
it loads with ``torch.load(weights_only=True)``::

    {"format": "pfd-checkpoint", "version": 1,
     "arch": model.arch,                    # create_backbone(**arch) rebuilds the backbone
     "backbone": state_dict,
     "head": {**head.spec(), "state_dict": ...} | None,
     "config": {...}, "step": int | None,
     "optimizer": state | None, "scheduler": state | None, "extra": {...} | None}

:func:`load_backbone` also reads insightface ``arcface_torch`` weights (``model.pt`` /
``backbone.pth``: a plain state dict), AdaFace ``.ckpt`` files (``{"state_dict": {"model.…",
"head.kernel", …}}``) and the public MobileFaceNet's (``{"epoch", "net_state_dict": {...}}`` or
its plain state dict), inferring the family, depth, width, input size (``[112, 96]`` for
MobileFaceNet's GDC kernel 7 x 6) and embedding dimension from the tensors, and strips DDP (``module.``) and ``torch.compile`` (``_orig_mod.``) prefixes. Every load
is ``weights_only=True``: a file that would need arbitrary Python objects is refused, and keys
are checked strictly (a mismatch lists the missing and unexpected keys).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import pickle
import warnings
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from pfd.data.shape import same_size, size_text
from pfd.errors import PfdError
from pfd.io import atomic_torch_save
from pfd.nn.heads import MarginHead, create_head
from pfd.nn.backbones import create_backbone
from pfd.nn.registry import FAMILIES, Arch, strip_wrappers
import zipfile

__all__ = [
    "FORMAT",
    "VERSION",
    "save_checkpoint",
    "load_checkpoint",
    "load_backbone",
    "load_head",
    "infer_arch",
    "read_arch",
    "check_arch",
]

FORMAT = "pfd-checkpoint"
VERSION = 1
_LIST_MAX = 10


# --- saving ---------------------------------------------------------------------------------


def _unwrap(model: nn.Module) -> nn.Module:
    """The module inside DDP / accelerate / torch.compile wrappers."""
    while True:
        inner = getattr(model, "module", None)
        if inner is None:
            inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def _cpu_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def _plain(obj: Any, where: str) -> Any:
    """``obj`` as tensors and plain Python values only (what ``weights_only`` loads)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, enum.Enum):
        return _plain(obj.value, where)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _plain(dataclasses.asdict(obj), where)
    if isinstance(obj, dict):
        return {k: _plain(v, f"{where}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    if hasattr(obj, "item") and getattr(obj, "shape", None) == ():  # numpy scalars
        return obj.item()
    if type(obj).__module__ == "numpy":
        return torch.as_tensor(obj)
    raise TypeError(
        f"{where}: cannot store a {type(obj).__name__} in a checkpoint (weights_only loading); "
        "convert it to tensors, numbers, strings, lists or dicts"
    )


def save_checkpoint(
    path: str | os.PathLike,
    *,
    backbone: nn.Module,
    head: MarginHead | None = None,
    config: Any = None,
    step: int | None = None,
    optimizer: Any = None,
    scheduler: Any = None,
    extra: Any = None,
) -> Path:
    """Write a pfd checkpoint atomically.

    Args:
        path: Destination file (parent folders are created).
        backbone: A model from :func:`pfd.nn.backbones.create_backbone` (wrappers are unwrapped).
        head: Optional margin head; its spec and state are stored.
        config: Plain dict (or dataclass) of the settings that produced the weights.
        step: Optimiser step count.
        optimizer: Optimiser or its ``state_dict()``, for resuming.
        scheduler: LR scheduler or its ``state_dict()``, for resuming.
        extra: Any further plain data.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: The backbone has no ``arch`` dict.
        TypeError: ``config`` / ``extra`` hold values that ``weights_only`` cannot load.
    """
    model = _unwrap(backbone)
    arch = getattr(model, "arch", None)
    if not isinstance(arch, dict):
        raise ValueError("backbone has no .arch dict; build it with pfd.nn.backbones.create_backbone")
    ck: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "arch": _plain(arch, "arch"),
        "backbone": _cpu_state(model),
        "head": None,
        "config": _plain({} if config is None else config, "config"),
        "step": None if step is None else int(step),
        "optimizer": None,
        "scheduler": None,
        "extra": _plain(extra, "extra"),
    }
    if head is not None:
        head = _unwrap(head)
        ck["head"] = {**_plain(head.spec(), "head"), "state_dict": _cpu_state(head)}
    for key, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None:
            ck[key] = _plain(obj.state_dict() if hasattr(obj, "state_dict") else obj, key)
    atomic_torch_save(ck, path)
    return Path(path)


# --- reading --------------------------------------------------------------------------------


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _torch_load(path: str | os.PathLike) -> Any:
    """``torch.load(weights_only=True)`` on CPU with one-line errors."""
    path = Path(path)
    if not path.is_file():
        raise PfdError(f"{path}: no such checkpoint file; check the path")
    try:
        with warnings.catch_warnings():
            # Bare pickles (not torch's zip format) trigger a protocol warning before being refused.
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            # TorchScript archives are refused below with their own message.
            warnings.filterwarnings("ignore", message=".*looks like a TorchScript archive")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # not a zip checkpoint at all: report it as unreadable below
            unsafe = []
        if unsafe:
            raise PfdError(
                f"{path}: refused to load: it holds Python objects ({', '.join(unsafe[:5])}) and pfd only "
                "loads tensors and plain values (weights_only); if you trust the file, re-save just its "
                "weights with torch.save(state_dict) and load that"
            ) from None
        raise PfdError(
            f"{path}: cannot read it as a weights-only torch checkpoint ({_short(e, 80)}); "
            "it is truncated, not a torch file, or holds Python objects; re-download or re-save it"
        ) from None
    except Exception as e:  # truncated zip (RuntimeError), empty (EOFError), text (KeyError), ...
        if _is_torchscript(path):  # torch refuses these under weights_only with a RuntimeError
            raise PfdError(
                f"{path}: is a TorchScript archive (torch.jit.save); pfd loads state dicts only (weights_only). "
                "Re-save its weights: torch.save(torch.jit.load(path).state_dict(), 'weights.pt'), then use that file"
            ) from None
        raise PfdError(
            f"{path}: cannot read checkpoint ({type(e).__name__}: {_short(e, 100)}); the file is truncated "
            "or not a torch checkpoint; re-download or re-save it"
        ) from None


def _is_torchscript(path: Path) -> bool:
    """Whether ``path`` is a TorchScript zip (it holds ``<name>/code/`` or ``constants.pkl``)."""
    try:
        if not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as z:
            return any(n.split("/", 1)[-1].startswith(("code/", "constants.pkl")) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _is_pfd(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("format") == FORMAT


def _check_pfd(obj: dict, path: str | os.PathLike) -> dict:
    version = obj.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise PfdError(
            f"{path}: pfd checkpoint version {version!r} is newer than this pfd reads ({VERSION}); upgrade pfd"
        )
    for key in ("arch", "backbone"):
        if not isinstance(obj.get(key), dict):
            raise PfdError(f"{path}: pfd checkpoint without {key!r}; the file is damaged, re-save it")
    return obj


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a pfd checkpoint (``weights_only=True``, tensors on CPU).

    Returns:
        The checkpoint dict (see the module docs for its keys).

    Raises:
        PfdError: Missing, corrupt or unsafe file, or not a pfd checkpoint.
    """
    obj = _torch_load(path)
    if not _is_pfd(obj):
        keys = ", ".join(map(str, list(obj)[:5])) if isinstance(obj, dict) else type(obj).__name__
        raise PfdError(
            f"{path}: not a pfd checkpoint (found {keys}); insightface/AdaFace weights load with "
            "load_backbone (pfd eval --model), or save with pfd.nn.checkpoints.save_checkpoint"
        )
    return _check_pfd(obj, path)


def _backbone_state(obj: Any, path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], Arch | None]:
    """(state dict in our key names, saved arch or None) from any supported file content: a pfd
    checkpoint, a family's foreign container (:attr:`~pfd.nn.registry.BackboneFamily.unwrap`) or a
    plain state dict."""
    if _is_pfd(obj):
        obj = _check_pfd(obj, path)
        return strip_wrappers(obj["backbone"]), Arch(**obj["arch"])
    unwrapped = next((sd for f in FAMILIES.values() if (sd := f.unwrap(obj)) is not None), None)
    if unwrapped is not None:
        sd = strip_wrappers(unwrapped)
    elif isinstance(obj, dict):
        sd = strip_wrappers(obj)
    else:
        raise PfdError(f"{path}: holds a {type(obj).__name__}, not model weights; expected a state dict or checkpoint")
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad or not sd:
        raise PfdError(
            f"{path}: not a backbone state dict "
            f"(non-tensor entries: {', '.join(map(str, bad[:5])) or 'none, it is empty'}); "
            "expected a pfd checkpoint or the weights of one of the backbone families ("
            + ", ".join(f.name for f in FAMILIES.values()) + ")"
        )
    return sd, None


def infer_arch(sd: dict[str, torch.Tensor]) -> Arch:
    """Rebuild ``create_backbone`` arguments from a foreign state dict: the first family that
    recognises its layout (:attr:`~pfd.nn.registry.BackboneFamily.infer_arch`) reads depth, width,
    input size and embedding dimension from the tensors. Dropout is not stored in weights and is 0.

    Raises:
        PfdError: A layout no family recognises (listing what each expects), or counts that fit no model.
    """
    for family in FAMILIES.values():
        arch = family.infer_arch(sd)
        if arch is not None:
            return arch
    raise PfdError(
        f"unrecognised backbone layout (first keys: {', '.join(list(sd)[:4])}); expected "
        + ", ".join(f.layout for f in FAMILIES.values()) + " keys"
    )


def _listing(keys: list[str]) -> str:
    shown = ", ".join(keys[:_LIST_MAX])
    more = f", (+{len(keys) - _LIST_MAX} more)" if len(keys) > _LIST_MAX else ""
    return f"[{shown}{more}]"


def _load_strict(module: nn.Module, sd: dict[str, torch.Tensor], path: Any, what: str) -> None:
    """``load_state_dict`` that reports every mismatch in one PfdError line.

    Missing ``num_batches_tracked`` counters are tolerated: older exports omit them and they do
    not affect inference (BN momentum is fixed).
    """
    own = module.state_dict()
    missing = [k for k in own if k not in sd and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in sd if k not in own]
    shapes = [
        f"{k} {tuple(sd[k].shape)} vs {tuple(own[k].shape)}" for k in own if k in sd and sd[k].shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        msg = (
            f"{path}: weights do not fit {what}: {len(missing)} missing keys {_listing(missing)}, "
            f"{len(unexpected)} unexpected keys {_listing(unexpected)}"
        )
        if shapes:
            msg += f", {len(shapes)} shape mismatches {_listing(shapes)}"
        raise PfdError(msg + "; load it with the architecture it was saved with (load_backbone(..., arch=...)) or check the file")
    module.load_state_dict(sd, strict=False)


def _describe(arch: Arch) -> str:
    size = arch.get("size")
    return (
        f"{arch.get('name')} (width {arch.get('width')}, size {size_text(size) if size else size}, "
        f"dim {arch.get('embedding_dim')})"
    )


def read_arch(path: str | os.PathLike) -> Arch:
    """The architecture of a backbone file (``create_backbone`` arguments) without building the model.

    What commands read to take the input size from a checkpoint (``size``: ``S`` or ``[H, W]``)
    when the user gave none.

    Raises:
        PfdError: As :func:`load_backbone` for an unreadable file or an unrecognised layout.
    """
    sd, saved = _backbone_state(_torch_load(path), path)
    if saved is not None:
        return saved
    try:
        return infer_arch(sd)
    except PfdError as e:
        raise PfdError(f"{path}: {e}") from None


def load_backbone(path: str | os.PathLike, *, arch: str | dict[str, Any] | None = None) -> nn.Module:
    """Build a backbone and load its weights from a pfd, insightface or AdaFace file.

    Args:
        path: pfd checkpoint, insightface ``model.pt`` / ``backbone.pth`` (plain state dict, with or
            without ``module.`` prefixes) or AdaFace ``.ckpt``.
        arch: Override: a backbone name (other settings still inferred from the weights) or a dict
            of :func:`~pfd.nn.backbones.create_backbone` arguments (merged over the inferred ones).

    Returns:
        The model in eval mode, with ``model.arch``.

    Raises:
        PfdError: Unreadable/unsafe file, unrecognised layout, or weights that do not fit the
            architecture (the message lists missing and unexpected keys).
    """
    sd, saved = _backbone_state(_torch_load(path), path)
    if saved is not None:
        base = saved
    else:
        try:
            base = infer_arch(sd)
        except PfdError as e:
            if arch is None:
                raise PfdError(f"{path}: {e}") from None
            base = {}
    if isinstance(arch, str):
        spec = {**base, "name": arch}
    elif isinstance(arch, dict):
        spec = {**base, **arch}
    else:
        spec = dict(base)
    model = create_backbone(**spec)
    what = _describe(model.arch)
    if base and base.get("name") != model.arch["name"]:
        what += f" (the weights look like {_describe(base)})"
    _load_strict(model, sd, path, what)
    return model.eval()


def load_head(path: str | os.PathLike) -> MarginHead:
    """The margin head stored in a pfd checkpoint, in eval mode.

    Raises:
        PfdError: Not a pfd checkpoint, no head stored, or the head state does not fit its spec.
    """
    ck = load_checkpoint(path)
    stored = ck.get("head")
    if not isinstance(stored, dict) or "state_dict" not in stored:
        raise PfdError(f"{path}: checkpoint has no margin head (saved without one); use a training checkpoint")
    spec = {k: v for k, v in stored.items() if k != "state_dict"}
    head = create_head(**spec)
    _load_strict(head, stored["state_dict"], path, f"{spec.get('kind')} head ({spec.get('num_classes')} classes)")
    return head.eval()


def check_arch(model: nn.Module | Mapping[str, Any], path: str | os.PathLike, *, size: Any, backbone: str = "",
               role: str = "public") -> None:
    """Refuse a public checkpoint whose architecture does not match the run's settings.

    Args:
        model: The loaded backbone (with ``arch``), or the arch itself (:func:`read_arch`).
        path: Its file, for the message.
        size: The image size of the run (``S`` or ``(H, W)``).
        backbone: Expected backbone name (empty: any).
        role: ``"public"`` (the run's model: ``--size`` can follow it) or ``"judge"`` (the gate's
            judge, which must be built for the run's size: the message says so).

    Raises:
        PfdError: Naming the checkpoint's architecture and what was expected.
    """
    arch = dict(model) if isinstance(model, Mapping) else dict(getattr(model, "arch", {}) or {})
    own = arch.get("size", size)
    what = f"{arch.get('name')} (width {arch.get('width')}, {size_text(own)}, D = {arch.get('embedding_dim')})"
    if not same_size(own, size):
        flag = size_text(own).removesuffix("px")
        if role == "judge":  # issue 34: a 48 px judge was called "the public model" and told to change --size
            raise PfdError(f"{path}: the judge is {what} but this run uses {size_text(size)} images; pass a --judge "
                           f"checkpoint built for {size_text(size)} (or --judge pretrain)")
        raise PfdError(
            f"{path}: the public model is {what} but this run uses {size_text(size)} images; "
            f"pass --size {flag} or a checkpoint built for {size_text(size)}"
        )
    if backbone and arch.get("name") != backbone:
        raise PfdError(
            f"{path}: the public model is {what} but the recipe expects backbone {backbone!r}; "
            "pass a matching --public checkpoint or --backbone ''"
        )
