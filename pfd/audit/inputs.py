"""What the scorecard reads: a release, the publisher's state dir and the private set, checked.

The release (``release/<label>/<k>.png`` + ``manifest.json``) is what an attacker has. The state
dir written by ``pfd distill`` (its layout: :class:`pfd.release.state_dir.StateDir`) is what only
the publisher has; the scorecard uses it to *score* attacks (which private identity each proxy came
from: the proxy map, required) and to play the insider (the adapted model); its public model is
the attacker's default public model, its judge the model that vouched for the release, and its
config's ``private`` spec the default private set.

Every mismatch between the three is a one-line :class:`~pfd.errors.PfdError` naming the file or
identity, because a score computed against the wrong private set is silently meaningless.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


from pfd.data.faceset import FaceSet
from pfd.release.format import MANIFEST, Manifest, read_manifest
from pfd.release.state_dir import StateDir, check_digest, read_run_config, release_sources, run_private_spec, run_setting
from pfd.data.shape import canonical_size
from pfd.errors import PfdError
from pfd.io import sha256_file

__all__ = ["ReleaseState", "open_release_state", "proxy_sources", "unwritten_release_state"]


@dataclass
class ReleaseState:
    """A release and the publisher state that goes with it (before any private data is read).

    Attributes:
        release: The release folder.
        state_dir: The state dir.
        manifest: The release manifest.
        files: Released files (``"0007/003.png"``) in the proxy map's order.
        sources: Per file, ``(source label, source name or None)`` from the proxy map.
        public_model: ``state_dir/public_model.pt`` if present.
        adapted_model: ``state_dir/adapted.pt`` if present.
        config: The parsed ``config.toml`` (empty if absent).
        judge_model: ``state_dir/judge_model.pt`` if present (the gate's judge, ``release.judge``).
        digests: SHA-256 of each file read, as it was read: the release's ``manifest.json`` (which holds
            every released file's) and the state dir's proxy map, models and private-set record, each
            checked against the run's record (:func:`~pfd.release.state_dir.check_digest`). What
            ``pfd card --resume`` compares, so nothing is hashed twice.
    """

    release: Path
    state_dir: Path
    manifest: Manifest
    files: list[str]
    sources: dict[str, tuple[int, str | None]] = field(repr=False)
    public_model: Path | None
    adapted_model: Path | None
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    judge_model: Path | None = None
    digests: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def image_size(self) -> int | tuple[int, int]:
        """Side of the released images (from the manifest)."""
        size = self.manifest.get("image_size", 0)
        return canonical_size(size) if size else 0

    @property
    def method(self) -> str:
        """Distillation method recorded in the manifest."""
        return str(self.manifest.get("method", "unknown"))

    @property
    def private_spec(self) -> str | None:
        """The private dataset spec recorded in the state dir's ``config.toml``, if any."""
        return run_private_spec(self.config)

    @property
    def run_size(self) -> Any:
        """The image size the run distilled at (``[distill] size`` of the state dir's config), if recorded."""
        v = run_setting(self.config, "size")
        return canonical_size(v) if v else None


def open_release_state(release: str | os.PathLike, state_dir: str | os.PathLike) -> ReleaseState:
    """Open and cross-check a release and its state dir.

    Args:
        release: Release folder (with ``manifest.json``).
        state_dir: The publisher's state dir (with ``proxy_map.json``).

    Returns:
        The :class:`ReleaseState`.

    Raises:
        PfdError: Missing folder or manifest, a state dir of another run (its run id differs from
            the manifest's), missing/damaged proxy map, a released file that the map does not know, or
            a mapped file missing from the release, or a proxy map or model of the state dir
            edited or replaced after the run recorded it.
    """
    r, st = Path(release), StateDir.at(state_dir)
    s = st.root
    if not r.is_dir():
        raise PfdError(f"{r}: no such release folder; pass the folder written by pfd distill (--release)")
    manifest = read_manifest(r)
    if manifest is None:
        raise PfdError(f"{r}: no pfd {MANIFEST}; is this a pfd release? (pfd distill writes one)")
    if not s.is_dir():
        raise PfdError(f"{s}: no such state dir; pass the --state-dir that pfd distill wrote")
    sources = release_sources(r, s, manifest=manifest)  # the one check: same run, same files (lint's too)
    digests = {MANIFEST: sha256_file(r / MANIFEST)}
    # The map, the attackers and the private-set record, each against the run's record where it has one.
    for p in (st.proxy_map, st.public_model, st.adapted, st.judge_model, st.private_set):
        if p.is_file():
            digests[p.name] = check_digest(s, p.name)
    return ReleaseState(release=r, state_dir=s, manifest=manifest, files=sorted(sources), sources=sources,
                        config=read_run_config(st.root), digests=digests, **_models(st))


def unwritten_release_state(state_dir: str | os.PathLike, *, method: str, image_size: tuple[int, int],
                            num_classes: int) -> ReleaseState:
    """The state of a release not yet written (``pfd distill``'s gate): the state dir's models and
    config, a manifest of what the release will record, and no files.

    Args:
        state_dir: The run's state dir.
        method: The distillation method.
        image_size: ``(H, W)`` of the proxies.
        num_classes: Classes the release will hold.

    Returns:
        The :class:`ReleaseState` with ``release=None``.

    Raises:
        PfdError: A damaged ``config.toml``.
    """
    st = StateDir.at(state_dir)
    h, w = (int(v) for v in image_size)
    manifest = {"method": method, "image_size": h if h == w else [h, w], "num_classes": int(num_classes)}
    return ReleaseState(release=None, state_dir=st.root, manifest=manifest, files=[], sources={},  # type: ignore[arg-type]
                        config=read_run_config(st.root), **_models(st))


def _models(st: StateDir) -> dict[str, Path | None]:
    """The public, adapted and judge models the state dir holds (``None``: absent)."""
    present = lambda p: p if p.is_file() else None  # noqa: E731
    return {"public_model": present(st.public_model), "adapted_model": present(st.adapted),
            "judge_model": present(st.judge_model)}


def proxy_sources(state: ReleaseState, names: list[str], private: FaceSet, *, private_spec: str = "") -> np.ndarray:
    """Source identity of each release image, as a label of the private set.

    Sources are matched by identity *name* when the proxy map has one (robust to a private set
    re-opened with another identity order), else by label.

    Args:
        state: The opened release state.
        names: Release sample names in the order the proxies will be embedded
            (``ReleaseFaces.names``: ``"<label>/<k>.png"``).
        private: The private set as opened for the attack.
        private_spec: How it was given (for error messages).

    Returns:
        ``(q,)`` int64 private labels.

    Raises:
        PfdError: A release image without a map row, or a source identity absent from the private set.
    """
    index = {name: i for i, name in enumerate(private.identities)}
    where = private_spec or "the private set"
    out = np.empty(len(names), dtype=np.int64)
    for i, f in enumerate(names):
        if f not in state.sources:
            raise PfdError(f"{state.release / f}: release image not in {StateDir.at(state.state_dir).proxy_map}; "
                           "the state dir does not belong to this release")
        label, name = state.sources[f]
        if name is not None:
            if name not in index:
                raise PfdError(f"source identity {name!r} of {f} is not in {where}; pass the private set this "
                               "release was distilled from (--private)")
            out[i] = index[name]
        else:
            if not 0 <= label < private.num_classes:
                raise PfdError(f"source label {label} of {f} is outside the {private.num_classes} identities of "
                               f"{where}; pass the private set this release was distilled from (--private)")
            out[i] = label
    return out
