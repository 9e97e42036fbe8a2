"""TOML recipes: find and read them, lay them and CLI flags over a stage dataclass, write the result.

Values resolve in this order, later winning: dataclass defaults < recipe table < CLI flags. The
resolved configuration is written next to every output (``config.toml``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any, Mapping, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from pfd.config.checks import outer_key, validate_config
from pfd.data.shape import ImageSizeSetting, plain_size
from pfd.errors import PfdError
from pfd.io import atomic_write_text

__all__ = ["RECIPE_TABLES", "RECIPES_DIR", "recipe_path", "load_recipe", "build_config", "config_to_dict", "dump_toml", "save_config"]

C = TypeVar("C")

#: The tables a recipe may hold: one per command or stage (``state/config.toml`` is a recipe too).
RECIPE_TABLES = ("attack", "augment", "card", "distill", "eval", "train")

#: recipes/ next to the package (a source checkout or an editable install).
RECIPES_DIR = Path(__file__).resolve().parent.parent.parent / "recipes"

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
            doc = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise PfdError(f"{path}: invalid TOML ({e}); fix the recipe file") from None
    except UnicodeDecodeError as e:
        raise PfdError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); save the recipe as UTF-8 TOML") from None
    except OSError as e:
        raise PfdError(f"{path}: cannot read the recipe ({e.strerror or e}); check the path") from None
    for key, value in doc.items():
        if key not in RECIPE_TABLES:
            close = difflib.get_close_matches(key, RECIPE_TABLES, n=1)
            hint = f"did you mean [{close[0]}]? " if close else ""
            raise PfdError(f"{path}: unknown table [{key}]; {hint}a recipe holds {', '.join(f'[{k}]' for k in RECIPE_TABLES)}")
        if not isinstance(value, dict):
            raise PfdError(f"{path}: {key} = {value!r} is not a table; write [{key}] and its settings below it")
    return doc


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a TOML/CLI value to the annotated field type, with a clear error."""
    if tp == ImageSizeSetting:  # S, [H, W] or "HxW"; 0 where a config lets it be decided later
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
            return 0
        return plain_size(value, what=where)
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
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise PfdError(f"{where}: expected a whole number, got {value!r}")
        try:
            out = int(value)
        except (TypeError, ValueError):
            raise PfdError(f"{where}: expected an integer, got {value!r}") from None
        if not -(2**63) <= out < 2**63:  # torch and numpy overflow past int64, after work has started
            raise PfdError(f"{where}: {out} is too large for a 64-bit integer; give a smaller value")
        return out
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
    override the recipe). Nested dataclass fields take nested tables and merge key by key. A config
    whose class names a ``TABLES_FIELD`` (a dict field) collects every other sub-table into it, by
    name: the tables of registered plugins (``[attack.reconstruction]``) that the config does not list.

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
    where = outer_key(where) if where else cls.__name__
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    tables = getattr(cls, "TABLES_FIELD", None)  # a dict field that collects the sub-tables of plugins
    merged: dict[str, Any] = {}
    for layer in layers:
        if not layer:
            continue
        for key, value in layer.items():
            name = key.replace("-", "_")
            if name not in fields and tables and isinstance(value, Mapping):
                merged.setdefault(tables, {})
                merged[tables][name] = {**merged[tables].get(name, {}), **value}
                continue
            if name == tables and isinstance(value, Mapping):
                merged.setdefault(tables, {})
                for k, v in value.items():
                    merged[tables][k] = {**merged[tables].get(k, {}), **v}
                continue
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
            tables = getattr(v, "TABLES_FIELD", None)  # plugin tables sit beside the fields, as a recipe has them
            out = {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v) if f.name != tables}
            return {**out, **conv(getattr(v, tables))} if tables else out
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
