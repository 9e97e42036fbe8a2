"""Outside attacker models: the face-recognition model an auditor already uses, with its input convention.

An auditor attacks a release with their own model, in whatever form they hold it:

* **ONNX** (``*.onnx``), run with onnxruntime on the CPU: the format in which insightface
  publishes its recognition models (e.g. ``w600k_r50.onnx``, ``1×3×112×112``);
* **TorchScript** archives (``torch.jit.save``);
* a **Python entry point** ``module:callable`` (importable from ``PYTHONPATH``) returning an
  ``nn.Module`` or a function ``images -> embeddings``; Python callers may also pass the module
  or function itself;
* a small **TOML spec** (``*.toml``) naming one of those and its input convention::

      model = "w600k_r50.onnx"      # relative to the TOML file; or "pkg.mod:factory"
      name = "arcface-r50"          # row label in the scorecard (default: the file stem)
      size = 112                    # or [H, W]; default: declared by the model, else 112
      mean = 127.5                  # or [R, G, B]; on the 0..255 scale
      std = 127.5
      resize = "stretch"            # or "pad" (letterbox to the input's aspect, as dlib/face-api)
      distance = "cosine"           # or "euclidean" (on the raw, unnormalised embeddings)
      channels = "rgb"              # or "bgr"

The model sees what its authors fed it: pfd's images (RGB in [0, 1], square) are resized to
``size`` (stretched, or scaled to fit and zero-padded), scaled to 0..255, normalised as
``(x − mean) / std`` and, for ``channels = "bgr"``, flipped to BGR. The default convention is
insightface's: RGB, ``(x − 127.5) / 127.5``, 112×112 stretched, cosine similarity.

Loading runs code from the file or module (TorchScript, ONNX operators, Python), so only load
models you trust.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from pfd.attackers.torchscript import first_line, is_torchscript, read_torchscript
from pfd.errors import PfdError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["InputConvention", "INSIGHTFACE", "AttackerSpec", "OnnxModel", "ConventionAdapter", "read_attacker_spec",
           "is_entry_point", "load_outside_model"]


@dataclass(frozen=True)
class InputConvention:
    """How a model wants its input, and how its embeddings are compared.

    Attributes:
        size: Input side ``S`` or ``(H, W)``; ``None`` = declared by the model, else 112.
        mean: Per-channel (or scalar) mean on the 0..255 scale.
        std: Per-channel (or scalar) standard deviation on the 0..255 scale.
        resize: ``"stretch"`` (resize to H×W) or ``"pad"`` (fit inside H×W keeping the aspect, pad
            with zeros).
        distance: ``"cosine"`` or ``"euclidean"`` (nearest neighbours on the raw embeddings).
        channels: ``"rgb"`` or ``"bgr"``.
    """

    size: int | tuple[int, int] | None = None
    mean: float | tuple[float, float, float] = 127.5
    std: float | tuple[float, float, float] = 127.5
    resize: str = "stretch"
    distance: str = "cosine"
    channels: str = "rgb"

    def checked(self, where: str) -> "InputConvention":
        """Validated, with sizes and colour statistics as tuples; raises a one-line PfdError."""
        def number(x: Any) -> float:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise TypeError
            return float(x)

        def triple(v: Any, what: str) -> tuple[float, float, float]:
            try:
                vals = [number(v)] * 3 if not isinstance(v, (list, tuple)) else [number(x) for x in v]
            except TypeError:
                vals = []
            if len(vals) != 3:
                raise PfdError(f"{where}: {what} must be one number or three (R, G, B), got {v!r}")
            return (vals[0], vals[1], vals[2])

        size = self.size
        if size is not None:
            try:
                raw = [size, size] if not isinstance(size, (list, tuple)) else list(size)
                hw = tuple(int(number(x)) for x in raw)
                whole = all(number(x) == int(number(x)) for x in raw)
            except TypeError:
                hw, whole = (), False
            if len(hw) != 2 or not whole or min(hw) < 1:
                raise PfdError(f"{where}: size must be S or [H, W] with positive whole sides, got {size!r}")
            size = hw
        std = triple(self.std, "std")
        if min(abs(s) for s in std) == 0:
            raise PfdError(f"{where}: std must be non-zero, got {self.std!r}")
        for key, allowed in (("resize", ("stretch", "pad")), ("distance", ("cosine", "euclidean")),
                             ("channels", ("rgb", "bgr"))):
            if getattr(self, key) not in allowed:
                raise PfdError(f"{where}: {key} must be one of {', '.join(allowed)}, got {getattr(self, key)!r}")
        return replace(self, size=size, mean=triple(self.mean, "mean"), std=std)


#: insightface's recognition models: RGB, (x − 127.5) / 127.5, 112×112 stretched, cosine.
INSIGHTFACE = InputConvention()


@dataclass
class AttackerSpec:
    """An outside attacker: a model (path, ``module:callable``, module or function) and its convention.

    Attributes:
        model: ``*.onnx``, TorchScript file, ``"module:callable"``, an ``nn.Module`` or a function.
        convention: Its :class:`InputConvention`.
        name: Row label in reports (default: the file stem or the callable's name).
    """

    model: Any
    convention: InputConvention = field(default_factory=InputConvention)
    name: str | None = None


def is_entry_point(spec: Any) -> bool:
    """Whether ``spec`` reads as ``module:callable`` rather than a file path."""
    if not isinstance(spec, str) or ":" not in spec or Path(spec).exists():
        return False
    module, _, attr = spec.partition(":")
    return bool(module) and bool(attr) and all(p.isidentifier() for p in module.split(".") + attr.split("."))


def read_attacker_spec(path: str | os.PathLike) -> AttackerSpec:
    """Read a TOML attacker spec (see the module docstring); ``model`` paths are relative to it.

    Raises:
        PfdError: Missing file, invalid TOML, unknown keys or bad values.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            table = tomllib.load(f)
    except FileNotFoundError:
        raise PfdError(f"{p}: no such attacker spec; give a .toml file") from None
    except tomllib.TOMLDecodeError as e:
        raise PfdError(f"{p}: invalid TOML ({e}); fix the attacker spec") from None
    known = {"model", "name"} | set(InputConvention.__dataclass_fields__)
    unknown = sorted(set(table) - known)
    if unknown:
        raise PfdError(f"{p}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    if "model" not in table:
        raise PfdError(f"{p}: no 'model' key; name the .onnx / TorchScript file or module:callable")
    model = str(table["model"])
    if not is_entry_point(model) and not Path(model).is_absolute():
        model = str(p.parent / model)
    conv = InputConvention(**{k: table[k] for k in InputConvention.__dataclass_fields__ if k in table})
    return AttackerSpec(model=model, convention=conv.checked(str(p)), name=table.get("name") or p.stem)


class OnnxModel(nn.Module):
    """An ONNX model run by onnxruntime (CPU), as a module mapping ``(B, 3, H, W)`` to ``(B, D)``.

    Args:
        path: The ``.onnx`` file.

    Raises:
        PfdError: If onnxruntime is missing or cannot load the file.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        try:
            import onnxruntime as ort
        except ImportError:  # pragma: no cover - a dependency, but say what to do
            raise PfdError("onnxruntime is not installed; pip install onnxruntime") from None
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # errors only
        try:
            self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - any load failure is a bad file
            raise PfdError(f"{path}: cannot load as ONNX ({first_line(e)}); re-export it") from None
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            names = ", ".join(f"{i.name} {list(i.shape)}" for i in inputs)
            raise PfdError(f"{path}: the ONNX graph has {len(inputs)} inputs ({names}); an attacker model takes one "
                           "image batch (B, 3, H, W): re-export it with a single input")
        inp = inputs[0]
        self.input_name = inp.name
        shape = list(inp.shape)
        self.fixed_batch = shape[0] if isinstance(shape[0], int) else None
        #: ``(H, W)`` declared by the graph, when static.
        self.declared = (shape[2], shape[3]) if len(shape) == 4 and all(isinstance(s, int) for s in shape[2:]) else None
        self.path = str(path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.detach().to("cpu", torch.float32).contiguous().numpy()
        if self.fixed_batch == 1 and a.shape[0] != 1:  # a graph exported for one image at a time
            outs = [torch.from_numpy(self.session.run(None, {self.input_name: a[i:i + 1]})[0]) for i in range(a.shape[0])]
            out = torch.cat(outs)
            return (out.reshape(a.shape[0], -1) if out.ndim > 2 else out).to(x.device)
        out = torch.from_numpy(self.session.run(None, {self.input_name: a})[0])
        # (B, D, 1, 1) and the like flatten to (B, D); (B,) stays (B,), which the probe refuses as a
        # Python model's would be (it is one number per image, not an embedding).
        return (out.reshape(a.shape[0], -1) if out.ndim > 2 else out).to(x.device)


class _Function(nn.Module):
    """A plain function ``images -> embeddings`` as a module (no parameters)."""

    def __init__(self, fn: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.fn(x))


class ConventionAdapter(nn.Module):
    """pfd images (RGB in [0, 1], square) -> what ``inner`` expects, by an :class:`InputConvention`.

    Args:
        inner: The model (module or ONNX wrapper).
        convention: A *checked* convention with ``size`` set.
    """

    def __init__(self, inner: nn.Module, convention: InputConvention) -> None:
        super().__init__()
        if convention.size is None or isinstance(convention.size, int):
            raise PfdError("ConventionAdapter needs a checked convention with size (H, W)")
        self.inner = inner
        self.convention = convention
        self.register_buffer("mean", torch.tensor(convention.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(convention.std).view(1, 3, 1, 1), persistent=False)

    def resize(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, 3, s, s)`` in [0, 1] -> ``(B, 3, H, W)`` by stretching or letterboxing."""
        h, w = self.convention.size  # type: ignore[misc]
        if x.shape[-2:] == (h, w):
            return x
        if self.convention.resize == "stretch":
            return F.interpolate(x, size=(h, w), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)
        scale = min(h / x.shape[-2], w / x.shape[-1])
        nh, nw = max(1, round(x.shape[-2] * scale)), max(1, round(x.shape[-1] * scale))
        y = F.interpolate(x, size=(nh, nw), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)
        top, left = (h - nh) // 2, (w - nw) // 2
        return F.pad(y, (left, w - nw - left, top, h - nh - top))  # zeros = black borders

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (self.resize(x) * 255.0 - self.mean) / self.std
        if self.convention.channels == "bgr":
            y = y.flip(1)
        return self.inner(y)


def _import_entry_point(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise PfdError(f"{spec}: cannot import it ({first_line(e)}); give module:callable on PYTHONPATH") from None
    if isinstance(obj, nn.Module):
        return obj
    if not callable(obj):
        raise PfdError(f"{spec}: not callable; give module:callable returning an nn.Module or a function")
    try:
        made = obj()
    except Exception as e:  # noqa: BLE001 - user code failed; say where
        raise PfdError(f"{spec}: calling it failed ({first_line(e)}); it must take no arguments and return "
                       "an nn.Module or a function images -> embeddings") from None
    if not (isinstance(made, nn.Module) or callable(made)):
        raise PfdError(f"{spec}: returned {type(made).__name__}, not an nn.Module or a function")
    return made


def load_outside_model(model: Any) -> tuple[nn.Module, str, tuple[int, int] | None, str]:
    """Load the raw model of an outside attacker (no convention applied yet).

    Args:
        model: ``*.onnx``, a TorchScript file, ``"module:callable"``, an ``nn.Module`` or a function.

    Returns:
        ``(module, kind, declared (H, W) or None, description)`` with kind in ``{"onnx",
        "torchscript", "python"}``.

    Raises:
        PfdError: For a missing file, an unreadable model or a bad entry point.
    """
    if isinstance(model, nn.Module):
        return model.eval(), "python", _declared_size(model), type(model).__name__
    if callable(model):
        return _Function(model), "python", None, getattr(model, "__name__", type(model).__name__)
    spec = str(model)
    if is_entry_point(spec):
        obj = _import_entry_point(spec)
        mod = obj.eval() if isinstance(obj, nn.Module) else _Function(obj)
        return mod, "python", _declared_size(obj), spec
    p = Path(spec)
    if not p.is_file():
        raise PfdError(f"{p}: no such attacker model; give an .onnx, TorchScript or .toml file, or module:callable")
    if p.suffix.lower() == ".onnx":
        onnx = OnnxModel(p)
        return onnx, "onnx", onnx.declared, str(p)
    if is_torchscript(p):
        ts, side = read_torchscript(p)
        return ts, "torchscript", (side, side) if side else None, str(p)
    raise PfdError(f"{p}: not an ONNX file (.onnx), a TorchScript archive or a .toml attacker spec; "
                   "export the model to one of them or pass module:callable")


def _declared_size(obj: Any) -> tuple[int, int] | None:
    for attr in ("size", "input_size"):
        v = getattr(obj, attr, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return (v, v)
    return None

