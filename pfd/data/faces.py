"""Identity folders (``root/<identity>/<image>``), seeded splits and the DataLoader factory.

Layout rules of :class:`FaceFolder` (docs/data.md has the full table):

* Each sub-folder of ``root`` is one identity; each image in it one sample. Identities and
  images are sorted in natural order (``id2`` before ``id10``), so labels and sample indices do
  not depend on the order in which the filesystem lists entries.
* Accepted images: :data:`~pfd.data.images.IMAGE_EXTENSIONS`, any case.
* Silently ignored everywhere: hidden entries (``.DS_Store``, ``._x.jpg``, ``.ipynb_checkpoints``)
  and operating-system litter (``Thumbs.db``, ``desktop.ini``, ``@eaDir``, ``__MACOSX``).
  Plain files directly in ``root`` that are not images (``manifest.json`` of a release,
  ``attributes.csv``, a README) are metadata and ignored too.
* Everything else that pfd cannot use is an error naming the file and the fix, or, with
  ``skip_bad=True``, a skipped entry that is counted (``FaceFolder.skipped``) and logged:
  a non-image file inside an identity folder (it may be a photo in a format pfd does not read,
  so silently dropping it would change the data), a folder inside an identity folder, an image
  directly in ``root``, an empty identity folder, and an image that cannot be decoded.
* Decoding is lazy by default (listing a large set is fast); ``validate=True`` (implied by
  ``skip_bad=True``, which must find bad files before labels are assigned) decodes every image
  at construction, and :meth:`FaceFolder.verify` does so on demand. An undecodable image is
  caught at load time at the latest, naming the file.
* ``min_images`` drops identities with fewer images; what was dropped is logged and kept in
  ``FaceFolder.dropped``. :func:`check_min_images` is the strict alternative (an error).
"""

from __future__ import annotations

import csv
import logging
import os
import random
import re
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from pfd.data.faceset import FaceSet, FaceSubset
from pfd.data.images import IMAGE_EXTENSIONS, ImageDecodeError, ImageDecoder, is_image_name
from pfd.data.shape import ImageSize, canonical_size
from pfd.errors import PfdError
import hashlib
import unicodedata

__all__ = [
    "FaceFolder",
    "natural_key",
    "split_identities",
    "split_images",
    "check_min_images",
    "check_min_identities",
    "drop_small_identities",
    "make_loader",
]

logger = logging.getLogger(__name__)

# Operating-system and archive litter, compared lower-case. Hidden names (leading dot) are
# ignored separately.
_JUNK_NAMES = frozenset({"thumbs.db", "ehthumbs.db", "ehthumbs_vista.db", "desktop.ini", "icon\r",
                         "@eadir", "__macosx", "$recycle.bin", "system volume information", "lost+found"})
_ACCEPTED = ", ".join(sorted(IMAGE_EXTENSIONS))
_SKIP_FIX = "or pass --skip-bad (skip_bad=True) to skip it"


def _is_junk(name: str) -> bool:
    return name.startswith(".") or name.lower() in _JUNK_NAMES


def natural_key(name: str) -> tuple:
    """Sort key that orders digit runs by value (``img2`` < ``img10``), ties by the raw string."""
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def _short_list(items: dict[str, object], limit: int = 8) -> str:
    shown = ", ".join(f"{k} ({v})" for k, v in list(items.items())[:limit])
    return shown + (f", ... and {len(items) - limit} more" if len(items) > limit else "")


class FaceFolder(FaceSet):
    """A :class:`FaceSet` over an identity folder ``root/<identity>/<image>``.

    Args:
        root: The dataset folder.
        size: Output side ``S`` (square) or ``(H, W)``; every image is resized to it.
        min_images: Drop identities with fewer images (reported in :attr:`dropped`).
        skip_bad: Skip (count and log) bad entries instead of raising; see the module docstring.
        validate: Decode every image at construction. Default: ``skip_bad``.

    Attributes:
        root: The dataset folder.
        dropped: ``{identity: image count}`` of identities removed by ``min_images``.
        skipped: ``{relative path: reason}`` of entries skipped under ``skip_bad``.
        attributes: Per-identity integer attributes read from ``root/attributes.csv`` when present
            (first column ``identity``, one integer column per attribute), else ``None``.

    Raises:
        PfdError: Missing path, not a folder of identity folders, or a bad entry (see above).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        size: ImageSize = 112,
        min_images: int = 1,
        skip_bad: bool = False,
        validate: bool | None = None,
    ) -> None:
        self.root = Path(root).expanduser()
        self.size = canonical_size(size)
        self.skip_bad = bool(skip_bad)
        self.skipped: dict[str, str] = {}
        self.dropped: dict[str, int] = {}
        self._decoder = ImageDecoder(self.size)

        listing = self._scan()
        if self.skip_bad if validate is None else validate:
            listing = self._validate(listing)
        for ident in [k for k, files in listing.items() if not files]:
            self._bad(f"{ident}/", "empty identity folder", "add its images or delete the folder")
            del listing[ident]
        if min_images > 1:
            self.dropped = {k: len(v) for k, v in listing.items() if len(v) < min_images}
            if self.dropped:
                logger.warning("%s: dropped %d identities with fewer than %d images: %s", self.root,
                               len(self.dropped), min_images, _short_list(self.dropped))
            listing = {k: v for k, v in listing.items() if len(v) >= min_images}
        if self.skipped:
            logger.warning("%s: skipped %d bad entries (--skip-bad): %s", self.root, len(self.skipped),
                           _short_list(self.skipped, 50))
        if not listing:
            if self.dropped:
                raise PfdError(f"{self.root}: no identity has at least {min_images} images (largest has "
                               f"{max(self.dropped.values())}); lower --min-images")
            raise PfdError(f"{self.root}: no usable images left after skipping {len(self.skipped)} bad entries; "
                           "check the folder")

        self.identities = list(listing)
        self._files = [f"{k}/{f}" for k in self.identities for f in listing[k]]
        self.labels = np.repeat(np.arange(len(self.identities), dtype=np.int64),
                                [len(listing[k]) for k in self.identities])
        self.attributes = _read_attributes(self.root / "attributes.csv", self.identities)

    # -- listing ---------------------------------------------------------------------------
    def _bad(self, rel: str, reason: str, fix: str) -> None:
        """Raise for a bad entry, or record it as skipped under ``skip_bad``."""
        if self.skip_bad:
            self.skipped[rel] = reason
            return
        raise PfdError(f"{self.root / rel}: {reason}; {fix}, {_SKIP_FIX}")

    def _scan(self) -> dict[str, list[str]]:
        root = self.root
        if not root.exists():
            raise PfdError(f"{root}: no such folder; pass a folder with one sub-folder of images per identity "
                           "(root/<identity>/<image>)")
        if not root.is_dir():
            raise PfdError(f"{root}: not a folder; an identity folder dataset is root/<identity>/<image> "
                           "(a RecordIO .rec file is opened with open_faces / --data)")
        ids, root_images = [], []
        ignored: dict[str, str] = {}
        with os.scandir(root) as it:
            for e in it:
                if _is_junk(e.name):
                    if e.is_dir():
                        ignored[e.name + "/"] = "hidden name" if e.name.startswith(".") else "operating-system folder"
                    continue
                if e.is_dir():
                    ids.append(e.name)
                elif is_image_name(e.name):
                    root_images.append(e.name)
                # other plain files in root are metadata (manifest.json, attributes.csv, README)
        root_images.sort(key=natural_key)
        if not ids:
            if root_images:
                raise PfdError(f"{root}: holds {len(root_images)} images directly (e.g. {root_images[0]}) but no "
                               f"identity folders; move each identity's images into its own folder "
                               f"{root}/<identity>/")
            raise PfdError(f"{root}: no identity folders found; expected root/<identity>/<image> "
                           f"with images of type {_ACCEPTED}")
        if ignored:
            logger.info("%s: not identity folders, skipped for their names: %s", root,
                        _short_list(dict(sorted(ignored.items())), 20))
        _check_symlinked_identities(root, ids)
        _check_utf8_names(root, ids)
        for name in root_images:
            self._bad(name, "image outside any identity folder", "move it into root/<identity>/ or delete it")
        listing: dict[str, list[str]] = {}
        for ident in sorted(ids, key=natural_key):
            files = []
            with os.scandir(root / ident) as it:
                for e in it:
                    if _is_junk(e.name):
                        continue
                    rel = f"{ident}/{e.name}"
                    if e.is_dir():
                        self._bad(rel, "folder inside an identity folder (identities are one level deep)",
                                  f"move its images up into {ident}/ or remove it")
                    elif is_image_name(e.name) and e.is_symlink() and not os.path.exists(root / rel):
                        self._bad(rel, f"a symbolic link to nothing (it points at {os.readlink(root / rel)!r}, which "
                                  "does not exist)", "fix or remove the link")
                    elif is_image_name(e.name) and not e.is_file():  # reading a FIFO would wait forever
                        self._bad(rel, "not a regular file (a FIFO, socket or device named like an image)",
                                  "replace it with the image file or remove it")
                    elif is_image_name(e.name):
                        files.append(e.name)
                    else:
                        ext = os.path.splitext(e.name)[1] or "no extension"
                        self._bad(rel, f"not an image file ({ext}; accepted: {_ACCEPTED})",
                                  "convert or remove it")
            listing[ident] = sorted(files, key=natural_key)
        _check_shared_photos(root, listing)
        return listing

    def _validate(self, listing: dict[str, list[str]]) -> dict[str, list[str]]:
        """Decode every image now; drop (skip_bad) or raise on the first bad one."""
        total = sum(len(v) for v in listing.values())
        out: dict[str, list[str]] = {}
        with tqdm(total=total, desc="checking images", unit="img", disable=None, leave=False) as bar:
            for ident, files in listing.items():
                good = []
                for f in files:
                    rel = f"{ident}/{f}"
                    try:
                        img = self._decoder.open(self.root / rel)
                    except ImageDecodeError as e:
                        if not self.skip_bad:
                            raise
                        self.skipped[rel] = e.reason
                    else:
                        self._decoder.check_square(img, str(self.root / rel))
                        good.append(f)
                    bar.update()
                out[ident] = good
        return out

    # -- FaceSet ---------------------------------------------------------------------------
    def load(self, index: int) -> torch.Tensor:
        rel = self._files[index]
        return self._decoder(self.root / rel, name=str(self.root / rel))

    def name(self, index: int) -> str:
        return self._files[index]

    def path(self, index: int) -> Path:
        """The file of sample ``index``."""
        return self.root / self._files[index]

    def verify(self) -> int:
        """Decode every image now (with a progress bar).

        Returns:
            The number of images checked.

        Raises:
            PfdError: Naming the first undecodable image and how many others failed.
        """
        bad: list[str] = []
        first: PfdError | None = None
        for i in tqdm(range(len(self)), desc="verifying images", unit="img", disable=None, leave=False):
            try:
                self._decoder.check_square(self._decoder.open(self.path(i)), str(self.path(i)))
            except PfdError as e:
                bad.append(self._files[i])
                first = first or e
        if first is not None:
            more = f" ({len(bad) - 1} more bad images)" if len(bad) > 1 else ""
            raise PfdError(f"{first}{more}")
        return len(self)


def _check_symlinked_identities(root: Path, ids: list[str]) -> None:
    """A symlinked identity folder that resolves to another listed identity, or two names that are
    one name once Unicode-normalised (``José`` as NFC and as NFD), would count one person twice
    under two labels.

    Raises:
        PfdError: Naming both folders.
    """
    spelled: dict[str, str] = {}
    for ident in sorted(ids, key=natural_key):
        key = unicodedata.normalize("NFC", ident)
        if key in spelled:
            raise PfdError(f"{root / ident}: the same name as identity {spelled[key]!r} once Unicode-normalised "
                           f"({ident.encode('unicode_escape').decode()} vs {spelled[key].encode('unicode_escape').decode()}: "
                           "one person under two labels); merge or rename one of the folders")
        spelled[key] = ident
    seen: dict[Path, str] = {}
    for ident in sorted(ids, key=lambda n: ((root / n).is_symlink(), natural_key(n))):  # real folders first
        target = (root / ident).resolve()
        if target in seen:
            link, other = (ident, seen[target])
            raise PfdError(f"{root / link}: a symlink to the same folder as identity {other!r} (one person under two "
                           f"labels); remove the link")
        seen[target] = ident


_WARNED_SHARED: set[tuple[str, str, str]] = set()


def _check_shared_photos(root: Path, listing: dict[str, list[str]]) -> None:
    """The same photo (a hard link or a byte-identical copy) in two identity folders is one person
    under two labels, or a mislabelled photo: either way the release would be wrong.

    Only files whose sizes collide across identities are read (hard links need no reading at all).

    Raises:
        PfdError: Naming both identities, one shared photo and how many they share.
    """
    by_size: dict[int, list[tuple[str, str, tuple[int, int]]]] = {}
    for ident, files in listing.items():
        for f in files:
            st = (root / ident / f).stat()
            by_size.setdefault(st.st_size, []).append((ident, f, (st.st_dev, st.st_ino)))
    shared: dict[tuple[str, str], list[str]] = {}
    for group in by_size.values():
        if len({ident for ident, _, _ in group}) < 2:
            continue
        keys: dict[Any, tuple[str, str]] = {}
        for ident, f, inode in group:
            for key in (("inode", inode), ("sha", hashlib.sha256((root / ident / f).read_bytes()).hexdigest())):
                first = keys.setdefault(key, (ident, f))
                if first[0] != ident:
                    shared.setdefault((first[0], ident), []).append(f"{ident}/{f} = {first[0]}/{first[1]}")
                    break
    for (a, b), pairs in sorted(shared.items(), key=lambda kv: -len(kv[1])):
        n = len(set(pairs))
        smaller = min(len(listing[a]), len(listing[b]))
        what = (f"{n} of {b!r}'s {len(listing[b])} photos are also in identity {a!r} (hard links or byte-identical "
                f"copies, e.g. {pairs[0]})")
        if n * 2 >= smaller:  # most of a folder: one person under two labels
            raise PfdError(f"{root / b}: {what}: one person under two labels; merge the two folders or remove one")
        # A few shared photos are mislabelled data (public sets have them: CelebA holds some); said
        # once per process, however often the set is opened.
        if (str(root), a, b) not in _WARNED_SHARED:
            _WARNED_SHARED.add((str(root), a, b))
            logger.warning("%s: %s: mislabelled photos, each used under two labels; remove the duplicates", root, what)


def _read_attributes(path: Path, identities: list[str]) -> dict[str, dict[str, int]] | None:
    """Integer attributes per identity from a CSV whose first column names the identity."""
    if not path.is_file():
        return None
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        header, body = rows[0], rows[1:]
        keep = set(identities)
        out = {r[0]: {k: int(v) for k, v in zip(header[1:], r[1:])} for r in body if r and r[0] in keep}
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        logger.warning("%s: not read as per-identity integer attributes (%s)", path, e)
        return None
    return out or None


# -- filters and checks ------------------------------------------------------------------------
def drop_small_identities(faces: FaceSet, min_images: int) -> FaceSet:
    """Remove identities with fewer than ``min_images`` images (relabelled view).

    The result has a ``dropped`` attribute ``{identity: count}``; what was dropped is logged.
    A :class:`FaceFolder` does this itself at construction.

    Raises:
        PfdError: No identity has enough images.
    """
    counts = faces.counts()
    small = np.flatnonzero(counts < min_images)
    if not len(small):
        return faces
    if len(small) == faces.num_classes:
        raise PfdError(f"{faces.describe()}: no identity has at least {min_images} images "
                       f"(largest has {counts.max(initial=0)}); lower --min-images")
    dropped = {faces.identities[k]: int(counts[k]) for k in small}
    logger.warning("dropped %d identities with fewer than %d images: %s", len(dropped), min_images,
                   _short_list(dropped))
    sub = faces.select_identities(np.flatnonzero(counts >= min_images))
    sub.dropped = dropped  # type: ignore[attr-defined]
    return sub


def check_min_images(faces: FaceSet, k: int, *, need: str | None = None, fix: str | None = None) -> None:
    """Require at least ``k`` images in every identity (the strict form of ``min_images``).

    Args:
        faces: The dataset.
        k: Required images per identity.
        need: Why, e.g. ``"K=10 proxies per class need at least 10"``.
        fix: An extra remedy placed before the ``--min-images`` one, e.g. ``"lower --ipc"``.

    Raises:
        PfdError: Naming the first short identity (in label order) and the fixes.
    """
    counts = faces.counts()
    short = np.flatnonzero(counts < k)
    if not len(short):
        return
    name, n = faces.identities[short[0]], int(counts[short[0]])
    others = f" ({len(short) - 1} other identities are short too)" if len(short) > 1 else ""
    remedies = ", ".join(x for x in ("add images", fix) if x)
    raise PfdError(f"identity {name!r} has {n} image{'s' if n != 1 else ''} but {need or f'at least {k} are required'}"
                   f"{others}; {remedies}, or pass --min-images {k} to drop it")


def check_min_identities(faces: FaceSet, n: int = 2, *, what: str = "training", where: object = None) -> None:
    """Require at least ``n`` identities: with one, a classifier learns nothing and a release says
    which single person it is about.

    Raises:
        PfdError: Naming the dataset and the count.
    """
    got = int(faces.num_classes)
    if got < n:
        src = f"{where}: " if where else ""
        raise PfdError(f"{src}{what} needs at least {n} identities, the data has {got}; add identity folders")


# -- splits ------------------------------------------------------------------------------------
def _split_counts(n: int, *, counts: Sequence[int] | None, fractions: Sequence[float] | None) -> list[int]:
    if (counts is None) == (fractions is None):
        raise ValueError("pass exactly one of counts= or fractions=")
    if counts is not None:
        sizes = [int(c) for c in counts]
        if any(c < 0 for c in sizes) or sum(sizes) > n:
            raise PfdError(f"cannot take {'+'.join(map(str, sizes))} identities from a set of {n}; "
                           "lower the counts or use fractions")
        return sizes
    fr = np.asarray(fractions, dtype=np.float64)
    if (fr <= 0).any() or fr.sum() > 1 + 1e-9:
        raise PfdError(f"split fractions {list(fractions)} must be positive and sum to at most 1")
    raw = fr * n
    sizes = np.floor(raw + 1e-9).astype(int)
    # Largest-remainder rounding so that the sizes add up to round(sum(fractions) * n); ties go
    # to the smaller part, so that 0.5 : 0.5 rounding never empties a part needlessly.
    order = np.lexsort((sizes, -(raw - sizes)))
    for i in order[: max(0, min(n, int(round(fr.sum() * n))) - sizes.sum())]:
        sizes[i] += 1
    if (sizes == 0).any():
        raise PfdError(f"split fractions {list(fractions)} of {n} identities leave a part empty; "
                       "use more identities or larger fractions")
    return sizes.tolist()


def split_identities(
    faces: FaceSet,
    *,
    counts: Sequence[int] | None = None,
    fractions: Sequence[float] | None = None,
    seed: int = 0,
) -> list[FaceSubset]:
    """Split into identity-disjoint parts (e.g. train/test identities), seeded.

    Args:
        faces: The dataset.
        counts: Identities per part (sum at most ``num_classes``), or
        fractions: Share of identities per part (sum at most 1; largest-remainder rounding).
        seed: Seed of the identity permutation.

    Returns:
        One :class:`FaceSubset` per part, relabelled to ``0..n-1`` in the parent's label order
        (``subset.parent_labels`` maps back); samples keep the parent's order.

    Raises:
        PfdError: The parts do not fit into the available identities.
    """
    sizes = _split_counts(faces.num_classes, counts=counts, fractions=fractions)
    perm = np.random.default_rng(seed).permutation(faces.num_classes)
    bounds = np.cumsum([0, *sizes])
    return [faces.select_identities(np.sort(perm[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]


def split_images(faces: FaceSet, *, per_identity: int, seed: int = 0) -> tuple[FaceSubset, FaceSubset]:
    """Split each identity's images into ``per_identity`` chosen ones and the rest, seeded.

    Each identity draws from its own generator seeded by ``(seed, crc32(name))``, so adding or
    removing other identities does not change its split. Both parts keep the parent's labels
    (``relabel=False``), so an identity has the same label in both (gallery/probe, train/val).

    Args:
        faces: The dataset.
        per_identity: Images per identity in the first part.
        seed: Split seed.

    Returns:
        ``(chosen, rest)`` subsets; sample order follows the parent.

    Raises:
        PfdError: An identity has fewer than ``per_identity`` images.
    """
    if per_identity < 0:
        raise ValueError("per_identity must be >= 0")
    chosen = []
    for label, name in enumerate(faces.identities):
        idx = faces.indices_of(label)
        if len(idx) < per_identity:
            raise PfdError(f"identity {name!r} has {len(idx)} images, fewer than per_identity={per_identity}; "
                           f"drop such identities first (--min-images {per_identity}) or lower it")
        rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
        chosen.append(idx[rng.permutation(len(idx))[:per_identity]])
    mask = np.zeros(len(faces), dtype=bool)
    if chosen:
        mask[np.concatenate(chosen)] = True
    return (faces.subset(np.flatnonzero(mask), relabel=False),
            faces.subset(np.flatnonzero(~mask), relabel=False))


# -- loading -----------------------------------------------------------------------------------
def _seed_worker(worker_id: int) -> None:
    """Seed numpy/random in each worker from torch's per-worker seed; one thread per worker."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
    torch.set_num_threads(1)  # workers decode images; intra-op threads would oversubscribe


def make_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    shuffle: bool,
    workers: int = 0,
    seed: int = 0,
    drop_last: bool = False,
) -> DataLoader:
    """A reproducible DataLoader over a FaceSet (or any map-style dataset).

    Args:
        dataset: The dataset.
        batch_size: Samples per batch.
        shuffle: Reshuffle every epoch (order fixed by ``seed``).
        workers: Worker processes (0: load in the main process). Workers persist across epochs.
        seed: Seeds the shuffling generator and, through it, every worker's RNGs.
        drop_last: Drop the last incomplete batch.

    Returns:
        The DataLoader; memory is pinned only when CUDA is available.
    """
    workers = max(0, int(workers))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=workers,
        generator=torch.Generator().manual_seed(int(seed)),
        worker_init_fn=_seed_worker if workers else None,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
        drop_last=drop_last,
    )


def _check_utf8_names(root: Path, ids: list[str]) -> None:
    """An identity folder whose name is not valid UTF-8 (e.g. Latin-1 ``Jos\\xe9`` from an old archive)
    cannot be written into a report, a proxy map or a page: refused with the folder named."""
    for ident in sorted(ids):
        try:
            ident.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(ident)
            fixed = raw.decode("latin-1")
            raise PfdError(f"{root}/{raw.decode('utf-8', 'backslashreplace')}: the identity folder's name is not valid "
                           f"UTF-8 (bytes {raw!r}); rename it (e.g. to {fixed!r}, its Latin-1 reading)") from None

