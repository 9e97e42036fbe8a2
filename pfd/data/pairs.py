"""Verification pairs and their files: LFW-style ``pairs.txt`` and insightface ``.bin``.

Pairs drawn from a face set live in :mod:`pfd.data.pair_sampling`.

A :class:`VerificationPairs` holds a :class:`~pfd.data.faceset.FaceSet` of the images involved
and, per pair, the indices of its two images and whether they show the same person. Pairs keep
their file order, so consecutive tenths are the ten LFW folds when the file has them.

insightface ``.bin`` files are pickles of ``(bins, issame_list)``: ``bins`` the encoded JPEG/PNG
bytes of ``2 n`` images (images ``2i`` and ``2i+1`` form pair ``i``), ``issame_list`` ``n``
booleans. Unpickling untrusted data can run arbitrary code, so :func:`read_bin` uses a restricted
unpickler that only rebuilds what such files contain: lists, tuples, bytes, booleans (opcodes, no
globals), ``_codecs.encode`` (how Python 3 stores bytes at protocol 2), ``builtins.bytes`` /
``bytearray``, and numpy arrays, dtypes and scalars (some packers store ``cv2.imencode`` output or
numpy booleans). Any other global is refused with an error naming it.
"""

from __future__ import annotations

import logging
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from pfd.data.faceset import FaceSet
from pfd.data.images import IMAGE_EXTENSIONS, ImageDecoder, ImageSource, encode_png
from pfd.data.shape import ImageSize, canonical_size
from pfd.errors import PfdError
from pfd.io import atomic_open

__all__ = [
    "VerificationPairs",
    "EncodedFaces",
    "read_pairs_txt",
    "read_bin",
    "write_bin",
]

logger = logging.getLogger(__name__)


@dataclass
class VerificationPairs:
    """Verification pairs over a set of face images.

    Attributes:
        faces: The images (labels are identities where known, see the readers).
        left: ``int64`` index into ``faces`` of each pair's first image, shape ``(P,)``.
        right: ``int64`` index of the second image, shape ``(P,)``.
        issame: ``bool`` genuine (same identity) flag per pair, shape ``(P,)``.
    """

    faces: FaceSet
    left: np.ndarray
    right: np.ndarray
    issame: np.ndarray

    def __post_init__(self) -> None:
        self.left = np.asarray(self.left, dtype=np.int64).reshape(-1)
        self.right = np.asarray(self.right, dtype=np.int64).reshape(-1)
        self.issame = np.asarray(self.issame, dtype=bool).reshape(-1)
        if not len(self.left) == len(self.right) == len(self.issame):
            raise ValueError("left, right and issame differ in length")
        n = len(self.faces)
        both = np.concatenate([self.left, self.right])
        if both.size and (both.min() < 0 or both.max() >= n):
            raise ValueError("pair index out of range of faces")

    def __len__(self) -> int:
        return int(len(self.issame))


class EncodedFaces(FaceSet):
    """A FaceSet over image files or in-memory encoded images, decoded lazily.

    Args:
        sources: Paths or encoded bytes, one per sample.
        labels: Identity per sample.
        identities: Label -> identity name.
        names: Stable sample names.
        size: Output side in pixels.
    """

    def __init__(self, sources: Sequence[ImageSource], labels: Sequence[int] | np.ndarray, *,
                 identities: Sequence[str], names: Sequence[str], size: ImageSize = 112, fix: str = "replace it") -> None:
        self.sources = list(sources)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.identities = list(identities)
        self._names = list(names)
        self.size = canonical_size(size)
        self._decoder = ImageDecoder(self.size, fix=fix)

    def load(self, index: int) -> torch.Tensor:
        return self._decoder(self.sources[index], name=self._names[index])

    def name(self, index: int) -> str:
        return self._names[index]


# -- pairs.txt ---------------------------------------------------------------------------------
def _is_int(s: str) -> bool:
    return s.lstrip("+-").isdigit()


def read_pairs_txt(path: str | os.PathLike, *, root: str | os.PathLike, size: ImageSize = 112) -> VerificationPairs:
    """Read an LFW-style ``pairs.txt``.

    Accepted lines (whitespace separated; blank lines and ``#`` comments ignored):

    * an optional header of one or two integers (``10 300``: folds and pairs per fold);
    * ``name i j``: genuine pair ``root/name/name_000i.jpg`` and ``..._000j.jpg`` (LFW naming; if
      no ``.jpg`` exists, the other image extensions are tried in turn);
    * ``name1 i name2 j``: impostor pair;
    * ``path1 path2 0|1``: a pair of image paths (relative to ``root`` or absolute) and its label.

    Each image is read once however many pairs use it. Labels are identities: the LFW name, or
    for path lines the parent folder.

    Args:
        path: The pairs file.
        root: Image root folder.
        size: Output side in pixels.

    Raises:
        PfdError: Missing file/root/image, or a line that fits none of the forms (names the line).
    """
    path, root = Path(path).expanduser(), Path(root).expanduser()
    if not path.is_file():
        raise PfdError(f"{path}: no such pairs file; pass an LFW-style pairs.txt")
    if not root.is_dir():
        raise PfdError(f"{root}: image root for {path.name} is not a folder; pass the folder holding "
                       "<name>/<name>_0001.jpg")
    exts = [".jpg"] + sorted(IMAGE_EXTENSIONS - {".jpg"})

    def lfw_file(name: str, num: str, lineno: int) -> tuple[str, str]:
        stem = f"{name}/{name}_{int(num):04d}"
        for ext in exts:
            if (root / (stem + ext)).is_file():
                return stem + ext, name
        raise PfdError(f"{root / (stem + '.jpg')}: image of {path.name} line {lineno} not found; "
                       "check that the image root holds <name>/<name>_0001.jpg")

    def plain_file(rel: str, lineno: int) -> tuple[str, str]:
        if not (root / rel).is_file():
            raise PfdError(f"{root / rel}: image of {path.name} line {lineno} not found; "
                           "paths are relative to the image root (or absolute)")
        parent = Path(rel).parent.as_posix()
        return rel, parent if parent not in ("", ".") else Path(rel).stem

    pairs: list[tuple[tuple[str, str], tuple[str, str], bool]] = []
    seen_content = False
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a byte-order mark (Windows editors) is not a token
    except UnicodeDecodeError as e:
        lineno = path.read_bytes()[: e.start].count(b"\n") + 1
        raise PfdError(f"{path}:{lineno}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); a pairs "
                       "file is UTF-8 text: re-save it as UTF-8") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        tok = line.split("#", 1)[0].split()
        if not tok:
            continue
        if not seen_content and len(tok) <= 2 and all(_is_int(t) for t in tok):
            seen_content = True  # header: folds [pairs per fold]
            continue
        seen_content = True
        if len(tok) == 3 and _is_int(tok[1]) and _is_int(tok[2]):
            pairs.append((lfw_file(tok[0], tok[1], lineno), lfw_file(tok[0], tok[2], lineno), True))
        elif len(tok) == 4 and _is_int(tok[1]) and _is_int(tok[3]):
            if tok[0] == tok[2]:
                raise PfdError(f"{path}:{lineno}: the impostor pair {line.strip()[:60]!r} names {tok[0]!r} twice; an "
                               f"impostor pair joins two people (a genuine pair is '{tok[0]} {tok[1]} {tok[3]}')")
            pairs.append((lfw_file(tok[0], tok[1], lineno), lfw_file(tok[2], tok[3], lineno), False))
        elif len(tok) == 3 and tok[2] in ("0", "1"):
            pairs.append((plain_file(tok[0], lineno), plain_file(tok[1], lineno), tok[2] == "1"))
        else:
            raise PfdError(f"{path}:{lineno}: cannot parse {line.strip()[:60]!r}; expected 'name i j', "
                           "'name1 i name2 j' or 'path1 path2 0|1'")
    if not pairs:
        raise PfdError(f"{path}: no pairs found; expected lines 'name i j' and 'name1 i name2 j'")

    files: dict[str, int] = {}
    idents: dict[str, int] = {}
    file_labels: list[int] = []
    left, right = [], []
    for a, b, _ in pairs:
        for (rel, ident), side in ((a, left), (b, right)):
            if rel not in files:
                files[rel] = len(files)
                file_labels.append(idents.setdefault(ident, len(idents)))
            side.append(files[rel])
    names = list(files)
    faces = EncodedFaces([root / n for n in names], file_labels, identities=list(idents), names=names, size=size,
                         fix="re-export it or remove its pairs")
    return VerificationPairs(faces, np.array(left), np.array(right), np.array([p[2] for p in pairs]))


# -- insightface .bin --------------------------------------------------------------------------
_BIN_GLOBALS = frozenset({
    ("_codecs", "encode"),
    ("builtins", "bytes"),
    ("builtins", "bytearray"),
    ("__builtin__", "bytes"),  # protocol < 3 names, mapped to builtins by the unpickler
    ("__builtin__", "bytearray"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
})


class _BinUnpickler(pickle.Unpickler):
    """Refuses every global outside :data:`_BIN_GLOBALS` (see the module docstring)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _BIN_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def read_bin(path: str | os.PathLike, *, size: ImageSize = 112) -> VerificationPairs:
    """Read an insightface verification ``.bin`` (``lfw.bin``, ``cfp_fp.bin``, ``agedb_30.bin``...).

    Loaded as ``pickle.load(f, encoding="bytes")`` does (Python 2 files included), through the
    restricted unpickler of the module docstring. Images are decoded lazily. Labels are
    pseudo-identities: images joined by genuine pairs share one, every other image has its own.

    Raises:
        PfdError: Missing file, a refused global, or contents that are not ``(bins, issame)``.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise PfdError(f"{path}: no such .bin file; pass an insightface verification .bin (e.g. lfw.bin)")
    try:
        with open(path, "rb") as f:
            obj = _BinUnpickler(f, encoding="bytes").load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("refused global"):
            raise PfdError(f"{path}: {e}; an insightface .bin holds only image bytes and booleans, so this file "
                           "is not one or is unsafe to load: check where it came from") from None
        raise PfdError(f"{path}: not a readable .bin pickle ({e}); re-download it") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, MemoryError) as e:
        raise PfdError(f"{path}: not a readable .bin pickle ({type(e).__name__}: {e}); re-download it") from None
    if not (isinstance(obj, (tuple, list)) and len(obj) == 2):
        raise PfdError(f"{path}: expected a pickled (bins, issame_list) pair, got {type(obj).__name__}; "
                       "is this an insightface verification .bin?")
    bins, issame_raw = obj
    issame = np.asarray(issame_raw).reshape(-1)
    if issame.size == 0:
        raise PfdError(f"{path}: holds no pairs ({len(bins)} images, an empty issame_list); pass a .bin with pairs")
    if issame.dtype != bool and not (np.issubdtype(issame.dtype, np.integer) and np.isin(issame, (0, 1)).all()):
        raise PfdError(f"{path}: issame_list holds {issame.dtype} values, not booleans; is this an insightface .bin?")
    issame = issame.astype(bool)
    n = len(issame)
    if len(bins) < 2 * n:
        raise PfdError(f"{path}: {len(bins)} images for {n} pairs (need {2 * n}); the file is incomplete, "
                       "re-download it")
    if len(bins) > 2 * n:
        raise PfdError(f"{path}: {len(bins)} images for {n} pair labels ({len(bins) // 2} pairs need {len(bins) // 2} "
                       "labels); the file is inconsistent, re-download or re-export it")
    sources: list[bytes] = []
    for i in range(2 * n):
        b = bins[i]
        if isinstance(b, np.ndarray) and b.dtype == np.uint8:
            b = b.tobytes()
        if not isinstance(b, (bytes, bytearray)):
            raise PfdError(f"{path}: image {i} is a {type(b).__name__}, not encoded image bytes; "
                           "is this an insightface .bin?")
        sources.append(bytes(b))
    labels = _pseudo_identities(2 * n, np.arange(0, 2 * n, 2)[issame], np.arange(1, 2 * n, 2)[issame])
    faces = EncodedFaces(sources, labels, identities=[f"group{k:05d}" for k in range(labels.max(initial=-1) + 1)],
                         names=[f"{path.name}#{i}" for i in range(2 * n)], size=size, fix="re-download the .bin")
    return VerificationPairs(faces, np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2), issame)


def _pseudo_identities(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of the 'same person' graph (union-find), numbered by first image."""
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in zip(a.tolist(), b.tolist()):
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    roots = np.array([find(i) for i in range(n)], dtype=np.int64)
    _, labels = np.unique(roots, return_inverse=True)
    return labels.astype(np.int64)


def write_bin(path: str | os.PathLike, images: Sequence[Any], issame: Sequence[bool], *, protocol: int = 4) -> Path:
    """Write an insightface-style ``.bin`` atomically (for tests and small exports).

    Args:
        path: Output file.
        images: ``2 * len(issame)`` images: encoded bytes (kept) or anything
            :func:`~pfd.data.images.encode_png` takes (stored as PNG).
        issame: Genuine flag per pair (images ``2i``, ``2i+1``).
        protocol: Pickle protocol (insightface used 2 under Python 2).

    Returns:
        The path written.
    """
    flags = [bool(x) for x in issame]
    if len(images) != 2 * len(flags):
        raise ValueError(f"{len(images)} images for {len(flags)} pairs (need {2 * len(flags)})")
    bins = [encode_png(im) for im in images]
    path = Path(path)
    with atomic_open(path, "wb") as f:
        pickle.dump((bins, flags), f, protocol=protocol)
    return path
