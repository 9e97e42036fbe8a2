"""The attackers an audit consults: the public model, the publisher's adapted model (the insider),
the gate's judge, and every model the auditor brings (``--attacker``), each with a unique row label.

:func:`own_attackers` loads the first three from the settings and the state dir;
:func:`outside_attackers` the auditor's own (checkpoints pfd reads itself, or any model with its
input convention, :mod:`pfd.attackers.outside`); :func:`refuse_duplicate_models` refuses a model
passed twice, whose rows would repeat another's and tighten every family-wise threshold for nothing.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from pfd.attackers.loading import Attacker, is_torchscript, load_attacker, load_outside_attacker
from pfd.attackers.outside import InputConvention, is_entry_point
from pfd.audit.inputs import ReleaseState
from pfd.config import AttackConfig
from pfd.data.shape import same_size, size_text
from pfd.embed import hash_state_dict
from pfd.errors import PfdError
from pfd.release.state_dir import StateDir

__all__ = ["own_attackers", "outside_attackers", "refuse_duplicate_models"]


def own_attackers(cfg: AttackConfig, state: ReleaseState, progress: bool) -> list[Attacker]:
    """The public model, the publisher's adapted model (the insider, unless ``--no-insider``) and the gate's judge
    (where the state dir holds one: the scorecard shows what vouched for the release), in that order."""
    st = StateDir.at(state.state_dir)
    public = cfg.public_model or state.public_model
    if public is None:
        raise PfdError(f"{st.public_model}: missing; pass the attacker's model with --public-model")
    if cfg.insider and state.adapted_model is None:
        raise PfdError(f"{st.adapted}: missing; pass the state dir pfd distill wrote, or --no-insider to skip the "
                       "insider attacker")
    roles = [("public", public, cfg.public_model_size or None), ("insider", state.adapted_model if cfg.insider else None, None),
             ("judge", state.judge_model, None)]
    out = [load_attacker(path, role=role, size=size, batch_size=cfg.batch_size, flip=cfg.flip, progress=progress)
           for role, path, size in roles if path is not None]
    for a in out:
        if a.role == "insider" and state.image_size and not same_size(a.size, state.image_size):
            raise PfdError(f"{a.path}: the adapted model takes {size_text(a.size)} images but the release is "
                           f"{size_text(state.image_size)}; the state dir does not belong to this release")
    return out


def outside_attackers(cfg: AttackConfig, extra: list[Any], taken: list[str], progress: bool) -> list[Attacker]:
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
    if not isinstance(spec, (str, os.PathLike)) or is_entry_point(spec):
        return False
    p = Path(spec)
    return p.is_file() and p.suffix.lower() not in (".onnx", ".toml") and not is_torchscript(p)


def _weights_digest(a: Attacker) -> str | None:
    """sha256 of an attacker's weights (:func:`pfd.embed.hash_state_dict`); ``None`` for a callable."""
    state = getattr(a.model, "state_dict", None)
    if state is None:
        return None
    sd = state()
    if not sd:
        return None
    h = hashlib.sha256()
    hash_state_dict(h, sd)
    return h.hexdigest()


def refuse_duplicate_models(own: list[Attacker], outside: list[Attacker]) -> None:
    """An outside attacker with the same weights as another attacker (the public model passed again as
    ``--attacker``) would repeat its rows and tighten every family-wise threshold for nothing (issue 34)."""
    if not outside:
        return
    seen: dict[str, Attacker] = {}
    for a in own:
        d = _weights_digest(a)
        if d is not None:
            seen.setdefault(d, a)
    for a in outside:
        d = _weights_digest(a)
        if d is None:
            continue
        if d in seen:
            raise PfdError(f"--attacker {a.path}: the same weights as the {seen[d].role} attacker ({seen[d].path}); "
                           "its rows would repeat that attacker's: pass each model once")
        seen[d] = a


def _one_or_three(v: Any) -> Any:
    vals = [float(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    return vals[0] if len(vals) == 1 else tuple(vals)
