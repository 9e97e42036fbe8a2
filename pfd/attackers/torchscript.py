"""TorchScript attacker models: recognise an archive, load it, read its declared input side.

Shared by :mod:`pfd.attackers.loading` (pfd-convention TorchScript) and
:mod:`pfd.attackers.outside` (TorchScript under an outside convention). Loading runs TorchScript
code from the file (TorchScript, not arbitrary Python), so only use files you trust.
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pfd.errors import PfdError

__all__ = ["META_FILE", "is_torchscript", "jit_load", "torchscript_size", "read_torchscript", "load_torchscript", "first_line"]

#: Extra file of a TorchScript archive that may carry ``{"size": S}``.
META_FILE = "pfd.json"


def is_torchscript(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a TorchScript archive (a zip holding ``code/`` and ``constants.pkl``).

    Plain ``torch.save`` files are zips too, but without TorchScript code.
    """
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return any("/code/" in n for n in names) and any(n.endswith("constants.pkl") for n in names)


def first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 160 else text[:157] + "..."


def jit_load(path: Path, extra: dict[str, Any] | None = None) -> Any:
    with warnings.catch_warnings():  # torch >= 2.9 deprecates TorchScript; loading still works
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.load(str(path), map_location="cpu", _extra_files=extra if extra is not None else {})


def torchscript_size(model: Any, path: Path, meta: str) -> int | None:
    """The input side declared by a TorchScript archive (extra file, then module attribute)."""
    if meta:
        try:
            return int(json.loads(meta)["size"])
        except (ValueError, KeyError, TypeError):
            raise PfdError(f"{path}: its {META_FILE} is not JSON with an integer 'size'; re-save it or "
                           "pass --public-model-size") from None
    for attr in ("size", "input_size"):
        v = getattr(model, attr, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def read_torchscript(path: Path) -> tuple[nn.Module, int | None]:
    """Load a TorchScript archive and the input side it declares.

    Args:
        path: The archive.

    Returns:
        ``(model in eval mode, declared side or None)``: the side from its ``pfd.json`` extra file,
        else from an integer ``size`` / ``input_size`` attribute.

    Raises:
        PfdError: The file does not load as TorchScript, or its ``pfd.json`` is malformed.
    """
    extra = {META_FILE: ""}
    try:
        model = jit_load(path, extra)
    except Exception as e:  # noqa: BLE001 - any failure to deserialise is a bad file
        raise PfdError(f"{path}: cannot load as TorchScript ({first_line(e)}); re-export it with torch.jit.save") from None
    meta = extra[META_FILE]
    return model.eval(), torchscript_size(model, path, meta.decode("utf-8", "replace") if isinstance(meta, bytes) else str(meta))


def load_torchscript(path: Path, size: int | None) -> tuple[nn.Module, int]:
    """A pfd-convention TorchScript attacker and its input side: ``size`` if given, else the declared one.

    Raises:
        PfdError: An unreadable archive, or no ``size`` and none declared.
    """
    model, declared = read_torchscript(path)
    side = size if size is not None else declared
    if side is None:
        raise PfdError(f"{path}: TorchScript model with no declared input size; pass --public-model-size S "
                       f"(or save it with _extra_files={{'{META_FILE}': '{{\"size\": S}}'}})")
    return model, int(side)
