"""What private set a run distilled: a digest recorded at its start, checked on every ``--resume``.

A state dir's model, prototypes, RTA batches and proxy map all belong to the private set the run
started from. ``--resume`` after that set changed used to go on silently: with an identity folder
renamed, ``proxy_map.json`` named the wrong source for every proxy; with a photo replaced, the
gate measured new photos against proxies made from old ones; with an identity added or removed it
failed deep inside with an ``IndexError``. :func:`record_private_set` writes
``state/private_set.json`` (the identities in label order and, per image, its identity, name and
the sha256 of its decoded pixels) when a run starts; :func:`check_private_set` compares the set a
resumed run opened with it and refuses any difference with one line naming it.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path
from typing import TypedDict

import numpy as np
import torch

from pfd.data.faceset import FaceSet
from pfd.errors import PfdError
from pfd.io import atomic_write_json
import logging

__all__ = ["private_set_record", "record_private_set", "check_private_set", "check_audited_private_set",
           "PrivateSetRecord"]

FORMAT = "pfd-private-set"


class PrivateSetRecord(TypedDict):
    """``state/private_set.json`` (private: it names people and files).

    Attributes:
        format: ``"pfd-private-set"``.
        identities: The identities in label order.
        images: Per image ``[identity, file name, pixel digest]``.
        sha256: The digest of the whole record's content.
    """

    format: str
    identities: list[str]
    images: list[list[str]]
    sha256: str


def _pixels_sha(img: torch.Tensor) -> str:
    t = img.detach().contiguous().cpu()
    return hashlib.sha256(t.numpy().tobytes() + str(tuple(t.shape)).encode()).hexdigest()[:32]


def private_set_record(faces: FaceSet) -> PrivateSetRecord:
    """The record of ``faces``: identities, and per image (identity, name, pixel digest)."""
    labels = np.asarray(faces.labels)
    images = [[faces.identities[int(labels[i])], faces.name(i), _pixels_sha(faces.load(i))] for i in range(len(faces))]
    whole = hashlib.sha256(repr((list(faces.identities), images)).encode()).hexdigest()
    return PrivateSetRecord(format=FORMAT, identities=list(faces.identities), images=images, sha256=whole)


def record_private_set(path: Path, record: PrivateSetRecord) -> None:
    """Write the record atomically (0600: it names private people and files)."""
    atomic_write_json(path, record)
    path.chmod(0o600)


def _differences(old: PrivateSetRecord, new: PrivateSetRecord) -> str:
    """The first differences between two records, in words."""
    was, now = list(old["identities"]), list(new["identities"])
    gone, added = [i for i in was if i not in set(now)], [i for i in now if i not in set(was)]
    if gone or added:
        parts = []
        if gone and added and len(gone) == len(added) and (
                unicodedata.normalize("NFC", gone[0]) == unicodedata.normalize("NFC", added[0])):
            parts.append(f"identity {gone[0]!r} is spelt in another Unicode form ({ascii(gone[0])} recorded, "
                         f"{ascii(added[0])} now; a folder copied through macOS is decomposed, NFD): rename the "
                         "folder back to the recorded form")
        elif gone and added and len(gone) == len(added):
            parts.append(f"identity {gone[0]!r} renamed or replaced by {added[0]!r}")
        else:
            if gone:
                parts.append(f"{len(gone)} identit{'y' if len(gone) == 1 else 'ies'} gone ({gone[0]!r}{', ...' if len(gone) > 1 else ''})")
            if added:
                parts.append(f"{len(added)} added ({added[0]!r}{', ...' if len(added) > 1 else ''})")
        return "; ".join(parts)
    if was != now:
        return "the identities are in another order"
    old_img = {(ident, name): sha for ident, name, sha in old["images"]}
    new_img = {(ident, name): sha for ident, name, sha in new["images"]}
    for key in old_img:
        if key not in new_img:
            return f"image {key[1]!r} of {key[0]!r} is gone"
    for key, sha in new_img.items():
        if key not in old_img:
            return f"image {key[1]!r} of {key[0]!r} was added"
        if old_img[key] != sha:
            return f"image {key[1]!r} of {key[0]!r} changed"
    return "the images are in another order"


def _read_record(path: Path, *, fix: str) -> PrivateSetRecord:
    """``state/private_set.json``, or a one-line error naming it and ``fix``."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("format") != FORMAT:
            raise ValueError("not a private-set record")
    except (OSError, ValueError, AttributeError) as e:
        raise PfdError(f"{path}: unreadable private-set record ({e}); the state dir is damaged: {fix}") from None
    return old


def check_private_set(path: Path, faces: FaceSet, *, spec: str) -> PrivateSetRecord:
    """Refuse a resumed run whose private set is not the one its state dir was made from.

    Args:
        path: ``state/private_set.json``.
        faces: The private set the resumed run opened.
        spec: The ``--private`` spec, for the message.

    Returns:
        The record of ``faces`` (to write when the state dir has none yet).

    Raises:
        PfdError: Naming the first difference (an identity renamed, added or removed; an image
            changed, added or removed) and the fix.
    """
    new = private_set_record(faces)
    if not path.is_file():

        logging.getLogger(__name__).warning(
            "%s: no record of the private set this run started from (a state dir of an older pfd); recording %s now, "
            "unchecked", path.parent, spec)
        return new
    old = _read_record(path, fix="start a new --state-dir")
    if old["sha256"] != new["sha256"]:
        raise PfdError(
            f"{spec}: the private set changed since this run started ({_differences(old, new)}); --resume would publish "
            "proxies and a proxy map of the old set against the new one: restore the private set, or distill it into "
            "a new --state-dir"
        )
    return new


def check_audited_private_set(path: Path, faces: FaceSet, *, spec: str) -> None:
    """Refuse an audit whose private set is not, by content, the one the state dir was distilled from.

    ``pfd attack`` and ``pfd card`` score each proxy against its source's photos: a ``--private``
    with the same identity names but other photos (issue 54: each folder holding the next folder's
    photos) gave "publishable" on meaningless figures. ``faces`` must be opened at the run's size
    (``[distill] size`` of the state dir's config), where the record's pixel digests were taken.

    Args:
        path: ``state/private_set.json`` (a state dir without one is not checked: nothing to compare).
        faces: The private set the audit opened, at the run's size.
        spec: How it was given, for the message.

    Raises:
        PfdError: Naming the first difference (an identity renamed, added or removed; an image
            changed, added or removed) and the fix.
    """
    if not path.is_file():
        return
    old = _read_record(path, fix="distill again into a new --state-dir")
    new = private_set_record(faces)
    if old["sha256"] != new["sha256"]:
        raise PfdError(f"{spec}: not the private set this release was distilled from ({_differences(old, new)}, by "
                       f"the pixel digests in {path}); pass the private set the state dir records (--private)")
