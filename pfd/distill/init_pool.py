"""Public face photos that RTA's proxies start from (``rta.init = "public"``), never private ones.

Not in the PFD paper, whose proxies start from Gaussian noise (eq. 10 is optimised "from noise",
as SRe2L). Dataset-distillation work since starts recovery from real images: RDED
(``LINs-lab/RDED``) selects real crops scored by the teacher, EDC and G-VBSM (``shaoshitong/EDC``)
take an ``--initial-img-dir``, and EDC reports +27 points over SRe2L's noise start at 10 images
per class on ImageNet-1k. A face start gives a proxy natural face structure from its first
iteration. Here the start must not be private: a proxy that began as a private photo would carry
its source's pixels into the release. So the pool is a *public* face set (``rta.init_data``), and
:func:`check_disjoint` refuses, before any work, a pool that shares a folder, a file or a photo
(exact pixels, a perceptual near-duplicate, or a rotated, rolled, cropped or pasted copy found by
the release audit's aligned search) with the private set.

Which photo seeds which proxy (:func:`init_assignment`): release class ``c`` (private identity
``c``) starts from the photos of one public identity ``π(c)``, ``π`` a permutation of the pool's
identities drawn from the RTA seed, and its ``K`` proxies from ``K`` different photos of that
person (a seeded order). A class then begins as one consistent person, as a class of a face
training set is, and the public person it begins as is drawn at random, with no relation to the
private identity. Pools with fewer identities than the private set, or a person with fewer photos
than ``K``, wrap around (two classes, or two proxies, then share a start; a warning says so).

Whether the pool should be disjoint from the downstream's public training people (so that no face
appears under two labels in a training set made of public data plus the release) is a benchmark
question (docs/benchmarks.md): either is allowed here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch

from pfd.data.faceset import FaceSet
from pfd.errors import PfdError
from pfd.io import atomic_write_json
from pfd.release.private_copies import SEARCH_VERSION, find_private_copies
from pfd.release.state_dir import STATE_FILE_MODE, StateDir, check_digest, record_digest

__all__ = ["INITS", "init_assignment", "check_disjoint", "pool_images", "PoolCheck", "pool_check", "checked_before",
           "record_pool_check", "InitPool"]

log = logging.getLogger(__name__)

#: ``rta.init`` values: the paper's Gaussian noise, or public face photos.
INITS = ("noise", "public")


def init_assignment(pool_labels: np.ndarray, n_ids: int, k: int, *, seed: int) -> np.ndarray:
    """The pool image each prototype row starts from.

    Row ``r`` is proxy ``j = r mod K`` of identity ``c = r // K`` (P is identity-major, eq. 8).

    Args:
        pool_labels: ``(m,)`` identity of each pool image.
        n_ids: Private identities N.
        k: Proxies per identity K.
        seed: The RTA seed.

    Returns:
        ``(N·K,)`` int64 pool image indices: class ``c``'s K proxies start from K distinct photos of
        pool identity ``π(c)`` (wrapping when the pool is smaller).
    """
    labels = np.asarray(pool_labels, dtype=np.int64)
    people = np.unique(labels)
    if people.size == 0:
        raise PfdError("the initialisation pool holds no images")
    order = np.random.default_rng(np.random.SeedSequence([int(seed), 2])).permutation(people)  # π
    out = np.empty(n_ids * k, dtype=np.int64)
    for c in range(n_ids):
        person = order[c % order.size]
        photos = np.flatnonzero(labels == person)
        photos = np.random.default_rng(np.random.SeedSequence([int(seed), 3, c])).permutation(photos)
        out[c * k : (c + 1) * k] = photos[np.arange(k) % photos.size]
    return out


def _resolved(spec: str) -> Path | None:
    if spec.startswith("synthetic") or "(in memory)" in spec:
        return None
    try:
        return Path(spec).expanduser().resolve()
    except OSError:
        return None


def check_disjoint(pool: FaceSet, private: FaceSet, *, pool_spec: str, private_spec: str,
                   used: np.ndarray | None = None) -> None:
    """Refuse an initialisation pool that could put a private pixel into an initial image.

    Args:
        pool: The public pool.
        private: The private set (same image size).
        pool_spec: ``rta.init_data`` (for the message).
        private_spec: ``--private`` (for the message).
        used: Pool indices that seed a proxy (default: all).

    Raises:
        PfdError: The pool is the private set or inside it (or holds it), a pool file is a private
            file, or a pool photo is a private photo (identical pixels or a perceptual
            near-duplicate: re-encoded, resized, brightened, mirrored, shifted or cropped; or an aligned
            copy: rotated, rolled, rescaled, pasted; :mod:`pfd.release.aligned_copies`), naming it.
    """
    a, b = _resolved(pool_spec), _resolved(private_spec)
    if a is not None and b is not None and (a == b or a in b.parents or b in a.parents):
        raise PfdError(f"--init-data {pool_spec} and --private {private_spec} overlap: the proxies must start from "
                       "public faces, never private ones; pass a folder of public faces")
    if pool_spec.strip() == private_spec.strip():
        raise PfdError(f"--init-data {pool_spec} is the private set: pass a set of public faces")

    images = pool_images(pool, used)
    # Aligned too (issue 34): a private photo rolled, cropped or rotated survives RTA's first iterations
    # (a proxy started from it kept a pixel correlation of 0.79 with it after 20), and only the aligned
    # search finds those edits; the audit's copy check on the released proxies cannot, once RTA has moved them.
    found = find_private_copies(images, private, aligned=True)
    if found:
        f = found[0]
        raise PfdError(f"--init-data {pool_spec}: {f.file} is private photo {f.private} ({f.how}; {len(found)} pool "
                       "photo(s) in all): the proxies must start from public faces, never private ones; remove "
                       "them from the pool")


def pool_images(pool: FaceSet, used: np.ndarray | None = None) -> list[tuple[str, np.ndarray]]:
    """``(name, (H, W, 3) uint8)`` of the pool photos ``used`` (default all), each once, in index order."""
    idx = np.unique(np.arange(len(pool)) if used is None else np.asarray(used))
    return [(pool.name(int(i)), np.clip(np.round(pool.load(int(i)).permute(1, 2, 0).numpy() * 255.0), 0, 255)
             .astype(np.uint8)) for i in idx]


class PoolCheck(TypedDict):
    """What a passed initialisation-pool check stands for (``state/init_pool_check.json``).

    Attributes:
        pool: Digest of the pixels of the pool photos that seed a proxy (sorted: names do not count).
        private: The private set's record digest (:func:`pfd.release.private_set.private_set_record`).
        search: :data:`pfd.release.private_copies.SEARCH_VERSION` of the search that passed them.
    """

    pool: str
    private: str
    search: int


def pool_check(pool: FaceSet, used: np.ndarray | None, *, private_sha: str) -> PoolCheck:
    """The :class:`PoolCheck` of this pool's used photos against the private set whose record digest is ``private_sha``."""
    digests = sorted(hashlib.sha256(img.tobytes() + str(img.shape).encode()).digest() for _, img in pool_images(pool, used))
    return PoolCheck(pool=hashlib.sha256(b"".join(digests)).hexdigest(), private=str(private_sha), search=SEARCH_VERSION)


def checked_before(state_dir: str | os.PathLike, key: PoolCheck) -> bool:
    """Whether the run that owns ``state_dir`` already passed this pool against this private set.

    The copy search takes ~0.1 CPU s a pool photo (17 min at 10^4 identities) and a ``--resume``
    would redo it for the same pixels; a record of a pass is taken only for the same pool pixels, the
    same private set and the same search.

    Raises:
        PfdError: The record was edited after the run wrote it (:func:`~pfd.release.state_dir.check_digest`).
    """
    path = StateDir.at(state_dir).init_pool_check
    if not path.is_file():
        return False
    check_digest(state_dir, path.name)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # an unreadable record proves nothing: the search runs again
    return doc == key


def record_pool_check(state_dir: str | os.PathLike, key: PoolCheck) -> None:
    """Record a passed pool check in the state dir (0600; its digest in the marker)."""
    path = StateDir.at(state_dir).init_pool_check
    atomic_write_json(path, key)
    os.chmod(path, STATE_FILE_MODE)
    record_digest(state_dir, path.name)


class InitPool:
    """The public photos of one run and the start of each proxy.

    Args:
        faces: The pool, at the proxies' image size (kept in memory).
        n_ids: Private identities N.
        k: Proxies per identity K.
        seed: The RTA seed.
    """

    def __init__(self, faces: FaceSet, *, n_ids: int, k: int, seed: int) -> None:
        self.faces = faces
        self.index = init_assignment(faces.labels, n_ids, k, seed=seed)  # (N·K,)
        people = np.unique(np.asarray(faces.labels)).size
        if people < n_ids:
            log.warning("the initialisation pool has %d identities for %d classes: %d classes share a starting person",
                        people, n_ids, n_ids - people)
        short = int((faces.counts() < k).sum())
        if short:
            log.warning("%d pool identities have fewer than K = %d photos: some proxies of a class share a start", short, k)

    def images(self, rows: Any) -> torch.Tensor:
        """``(B, 3, H, W)`` float32 in [0, 1]: the starting photos of prototype rows ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        return torch.stack([self.faces.load(int(self.index[r])) for r in rows]).float()

    @property
    def used(self) -> np.ndarray:
        """Pool indices that seed at least one proxy."""
        return np.unique(self.index)
