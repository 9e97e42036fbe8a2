"""insightface / MXNet RecordIO training sets (``train.rec`` + ``train.idx``), pure Python.

File format (dmlc-core ``recordio``, all little-endian):

* ``.rec``: a sequence of parts. Each part is ``uint32 magic = 0xced7230a``, a ``uint32`` length
  word (lower 29 bits: payload length; upper 3 bits: continuation flag ``cflag``), the payload,
  and zero padding to a multiple of 4 bytes. ``cflag`` 0 is a whole record; 1, 2, 3 are the
  start, middle and end of a record that the writer split wherever the magic word occurred
  (4-byte aligned) inside the payload. The magic word itself is not stored there: the reader
  puts it back between parts.
* ``.idx``: text lines ``key<TAB>offset`` giving each record's byte offset in the ``.rec``.
* Record payload (``mx.recordio.pack``): an IRHeader ``struct "IfQQ"`` = ``flag`` (uint32),
  ``label`` (float32), ``id``, ``id2`` (uint64); if ``flag > 0``, ``flag`` float32 labels follow
  (the label array; ``label`` is then unused), then the encoded image (JPEG/PNG).

Two layouts:

* insightface (``face2rec2``, MS1M/Glint/WebFace packages): record 0 has ``flag > 0``, no image,
  and the label array ``[img_end, id_end]``; images are keys ``1 .. img_end-1``; keys
  ``img_end .. id_end-1`` are identity records whose label array is that identity's image key
  range ``[start, end)``. Identity ``k`` (the k-th identity record) gets label ``k``.
* ``im2rec``: no header record; every key is an image, labelled by its header (``label``, or the
  first entry of the label array). Raw labels are mapped to ``0..n-1`` in increasing order, and
  reading them costs one small read per record at open.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from pfd.data.faceset import FaceSet
from pfd.data.images import ImageDecoder, encode_png
from pfd.data.shape import ImageSize, canonical_size
from pfd.errors import PfdError
from pfd.io import atomic_open

__all__ = [
    "MAGIC",
    "IRHeader",
    "RecordReader",
    "RecordIOFaces",
    "pack_record",
    "unpack_record",
    "read_index",
    "build_index",
    "write_recordio",
    "resolve_rec",
]

logger = logging.getLogger(__name__)

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_IR = struct.Struct("<IfQQ")  # flag, label, id, id2 (24 bytes)
_LEN_MASK = (1 << 29) - 1


class IRHeader(tuple):
    """The decoded record header: ``(flag, label, id, id2)``; ``label`` is a float or an array."""

    __slots__ = ()

    def __new__(cls, flag: int, label: Any, id: int = 0, id2: int = 0) -> "IRHeader":  # noqa: A002
        return super().__new__(cls, (flag, label, id, id2))

    flag = property(lambda self: self[0])
    label = property(lambda self: self[1])
    id = property(lambda self: self[2])
    id2 = property(lambda self: self[3])


def pack_record(label: float | Sequence[float], payload: bytes, *, id: int = 0, id2: int = 0) -> bytes:  # noqa: A002
    """Build a record payload as ``mx.recordio.pack`` does: IRHeader (+ label array) + bytes."""
    if isinstance(label, (int, float, np.integer, np.floating)):
        return _IR.pack(0, float(label), id, id2) + payload
    arr = np.asarray(label, dtype="<f4").ravel()
    return _IR.pack(arr.size, 0.0, id, id2) + arr.tobytes() + payload


def unpack_record(record: bytes) -> tuple[IRHeader, bytes]:
    """Split a record payload into its :class:`IRHeader` and the image bytes (``mx.recordio.unpack``).

    Raises:
        ValueError: The record is shorter than its header says.
    """
    if len(record) < _IR.size:
        raise ValueError(f"record of {len(record)} bytes is shorter than the 24-byte IRHeader")
    flag, label, id_, id2 = _IR.unpack_from(record)
    body = record[_IR.size:]
    if flag > 0:
        if len(body) < 4 * flag:
            raise ValueError(f"record header announces {flag} labels but holds {len(body)} bytes")
        return IRHeader(flag, np.frombuffer(body, "<f4", flag).copy(), id_, id2), body[4 * flag:]
    return IRHeader(flag, label, id_, id2), body


def _frame(payload: bytes) -> bytes:
    """Frame one record as dmlc's RecordIOWriter does, splitting at aligned magic words."""
    out, start, n = [], 0, len(payload)
    for i in range(0, n - n % 4, 4):
        if payload[i:i + 4] == _MAGIC_BYTES:
            out += [_MAGIC_BYTES, struct.pack("<I", ((1 if start == 0 else 2) << 29) | (i - start)), payload[start:i]]
            start = i + 4
    out += [_MAGIC_BYTES, struct.pack("<I", ((3 if start else 0) << 29) | (n - start)), payload[start:]]
    out.append(b"\0" * (-n % 4))  # earlier parts have aligned lengths; only the last needs padding
    return b"".join(out)


# -- index -------------------------------------------------------------------------------------
def resolve_rec(path: str | os.PathLike) -> Path:
    """The ``.rec`` file for a ``.rec``/``.idx`` path or a folder holding ``train.rec``."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p / "train.rec"
    return p.with_suffix(".rec") if p.suffix == ".idx" else p


def read_index(idx_path: str | os.PathLike) -> dict[int, int]:
    """Read a ``.idx`` file into ``{key: byte offset}`` (file order).

    Raises:
        PfdError: A line is not ``key<TAB>offset``.
    """
    index: dict[int, int] = {}
    with open(idx_path, encoding="ascii", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.split()
            try:
                key, off = int(parts[0]), int(parts[1])
            except (ValueError, IndexError):
                raise PfdError(f"{idx_path}:{lineno}: not a 'key<TAB>offset' index line ({line.strip()[:40]!r}); "
                               "rebuild the index with pfd.data.recordio.build_index") from None
            if off < 0 or key < 0:
                raise PfdError(f"{idx_path}:{lineno}: negative {'offset' if off < 0 else 'key'} in {line.strip()[:40]!r}; "
                               "the index is damaged: rebuild it with pfd.data.recordio.build_index")
            index[key] = off
    return index


def build_index(rec_path: str | os.PathLike, *, idx_path: str | os.PathLike | None = None) -> Path:
    """Scan a ``.rec`` and write its ``.idx`` (keys 0, 1, 2, ... in file order), atomically.

    insightface's packers number records in file order, so this reproduces their index; an
    ``im2rec`` set packed from a shuffled list gets new keys for the same records.

    Returns:
        The path of the index written.

    Raises:
        PfdError: The file is not RecordIO or is truncated (names the byte offset).
    """
    rec = Path(rec_path)
    idx = Path(idx_path) if idx_path is not None else rec.with_suffix(".idx")
    size = rec.stat().st_size
    lines, key, off = [], 0, 0
    with open(rec, "rb") as f, tqdm(total=size, desc="indexing", unit="B", unit_scale=True, disable=None,
                                    leave=False) as bar:
        while off < size:
            head = f.read(8)
            if len(head) < 8 or head[:4] != _MAGIC_BYTES:
                raise PfdError(f"{rec}: no RecordIO record at byte {off} (truncated or not a .rec file); "
                               "re-download or re-pack it")
            word = struct.unpack("<I", head[4:])[0]
            cflag, length = word >> 29, word & _LEN_MASK
            if cflag in (0, 1):  # a record starts here
                lines.append(f"{key}\t{off}\n")
                key += 1
            step = 8 + length + (-length % 4)
            off += step
            f.seek(off)
            bar.update(step)
    if off != size:
        raise PfdError(f"{rec}: last record runs past the end of the file (truncated); re-download or re-pack it")
    with atomic_open(idx, "w") as f:
        f.writelines(lines)
    logger.info("%s: wrote %d index entries to %s", rec, key, idx)
    return idx


# -- random access -----------------------------------------------------------------------------
class RecordReader:
    """Random access to the records of a ``.rec`` through its ``.idx``.

    The file is opened lazily per process, so a reader can be handed to DataLoader workers.

    Args:
        rec_path: The ``.rec`` file.
        idx_path: Its index (default: same stem, ``.idx``).

    Raises:
        PfdError: The ``.rec`` or the ``.idx`` is missing.
    """

    def __init__(self, rec_path: str | os.PathLike, *, idx_path: str | os.PathLike | None = None) -> None:
        self.rec_path = Path(rec_path)
        self.idx_path = Path(idx_path) if idx_path is not None else self.rec_path.with_suffix(".idx")
        if not self.rec_path.is_file():
            raise PfdError(f"{self.rec_path}: no such RecordIO file; pass a .rec file or a folder holding "
                           "train.rec and train.idx")
        if not self.idx_path.is_file():
            raise PfdError(
                f"{self.rec_path}: its index {self.idx_path} is missing; rebuild it with "
                f"python -c \"from pfd.data.recordio import build_index; build_index('{self.rec_path}')\"")
        self.index = read_index(self.idx_path)
        self.keys = list(self.index)
        self._file = None
        self._pid = -1

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_file"], state["_pid"] = None, -1  # never share a file position across processes
        return state

    def _fp(self):
        if self._file is None or self._pid != os.getpid():
            self._file = open(self.rec_path, "rb")  # noqa: SIM115 - kept open for random access
            self._pid = os.getpid()
        return self._file

    def close(self) -> None:
        """Close the file (it reopens on the next read)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def read(self, key: int, *, limit: int | None = None) -> bytes:
        """The payload of record ``key``, multi-part records reassembled.

        Args:
            key: Record key (from the index).
            limit: Read at most this many bytes of a single-part record (header peeks).

        Raises:
            PfdError: Unknown key, or the bytes at its offset are not a record.
        """
        try:
            off = self.index[key]
        except KeyError:
            raise PfdError(f"{self.rec_path}: key {key} is not in {self.idx_path}; rebuild the index "
                           "with pfd.data.recordio.build_index") from None
        f = self._fp()
        f.seek(off)
        parts = []
        while True:
            head = f.read(8)
            if len(head) < 8 or head[:4] != _MAGIC_BYTES:
                raise PfdError(f"{self.rec_path}: no record at byte {f.tell() - len(head)} (key {key}); the .idx "
                               "does not match the .rec: rebuild it with pfd.data.recordio.build_index")
            word = struct.unpack("<I", head[4:])[0]
            cflag, length = word >> 29, word & _LEN_MASK
            if limit is not None and cflag == 0:
                return f.read(min(length, limit))
            data = f.read(length + (-length % 4))
            if len(data) < length:
                raise PfdError(f"{self.rec_path}: record {key} is truncated; re-download or re-pack the set")
            parts.append(data[:length])
            if cflag in (0, 3):
                return _MAGIC_BYTES.join(parts)  # the writer dropped a magic word at every split
            limit = None

    def header(self, key: int) -> tuple[IRHeader, bytes]:
        """Header and image bytes of record ``key``."""
        try:
            return unpack_record(self.read(key))
        except ValueError as e:
            raise PfdError(f"{self.rec_path}: record {key} is malformed ({e}); re-pack the set") from None


class RecordIOFaces(FaceSet):
    """A :class:`FaceSet` over an insightface / ``im2rec`` RecordIO set.

    Args:
        path: A ``.rec`` file, or a folder holding ``train.rec`` and ``train.idx``.
        size: Output side ``S`` or ``(H, W)`` (images are resized if needed).

    Attributes:
        keys: ``np.int64`` record key of every sample.
        layout: ``"insightface"`` or ``"im2rec"``.

    Raises:
        PfdError: Missing files or index, malformed records.
    """

    def __init__(self, path: str | os.PathLike, *, size: ImageSize = 112) -> None:
        self.reader = RecordReader(resolve_rec(path))
        self.size = canonical_size(size)
        self._decoder = ImageDecoder(self.size, fix="re-pack the set")
        if not self.reader.keys:
            raise PfdError(f"{self.reader.idx_path}: the index is empty; rebuild it with "
                           "pfd.data.recordio.build_index")
        first = self.reader.keys[0]
        head, body = self.reader.header(first)
        if head.flag > 0 and not body and len(head.label) >= 2:
            self.layout = "insightface"
            self._from_header(int(head.label[0]), int(head.label[1]))
        else:
            self.layout = "im2rec"
            self._from_records()

    def _from_header(self, img_end: int, id_end: int) -> None:
        keys, labels = [], []
        for k, key in enumerate(range(img_end, id_end)):
            head, _ = self.reader.header(key)
            if head.flag < 2:
                raise PfdError(f"{self.reader.rec_path}: identity record {key} has no [start, end) range; "
                               "the header record 0 does not describe this file")
            start, end = int(head.label[0]), int(head.label[1])
            keys.append(np.arange(start, end, dtype=np.int64))
            labels.append(np.full(end - start, k, dtype=np.int64))
        self.keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        self.labels = np.concatenate(labels) if labels else np.zeros(0, np.int64)
        missing = np.setdiff1d(self.keys, np.asarray(self.reader.keys[1:], dtype=np.int64))
        if missing.size:
            raise PfdError(f"{self.reader.idx_path}: image key {int(missing[0])} of the identity ranges is not in "
                           f"the index ({missing.size} missing); rebuild it with pfd.data.recordio.build_index")
        self.identities = [str(k) for k in range(id_end - img_end)]

    def _from_records(self) -> None:
        raw = np.empty(len(self.reader.keys), dtype=np.int64)
        for i, key in enumerate(tqdm(self.reader.keys, desc="reading labels", unit="rec", disable=None,
                                     leave=False)):
            try:
                head, _ = unpack_record(self.reader.read(key, limit=_IR.size + 4))
            except ValueError as e:
                raise PfdError(f"{self.reader.rec_path}: record {key} is malformed ({e}); re-pack the set") from None
            lab = head.label[0] if head.flag > 0 else head.label
            raw[i] = int(lab)
        uniq, self.labels = np.unique(raw, return_inverse=True)
        self.labels = self.labels.astype(np.int64)
        self.keys = np.asarray(self.reader.keys, dtype=np.int64)
        self.identities = [str(int(u)) for u in uniq]

    def load(self, index: int) -> torch.Tensor:
        key = int(self.keys[index])
        head, img = self.reader.header(key)
        if self.layout == "insightface":
            self._check_label(key, int(self.labels[index]), head)
        return self._decoder(img, name=f"{self.reader.rec_path} record {key}")

    def _check_label(self, key: int, label: int, head: IRHeader) -> None:
        """An image record's own header label must be that of its identity's other records.

        In the insightface layout the identity comes from the identity record's key range, so an
        ``.idx`` whose offsets were swapped would hand out another identity's image under this
        label without a word; each image record also carries its identity in its header, which
        must be one and the same label for every record of an identity (and differ between
        identities).

        Raises:
            PfdError: Naming the record and the fix (rebuild the index).
        """
        raw = float(head.label[0]) if head.flag > 0 else float(head.label)
        if not hasattr(self, "_raw"):
            self._raw: dict[int, float] = {}
            self._owner: dict[float, int] = {}
        expected = self._raw.setdefault(label, raw)
        owner = self._owner.setdefault(raw, label)
        if expected != raw or owner != label:
            raise PfdError(f"{self.reader.rec_path}: record {key} carries identity label {raw:g} in its header, but the "
                           f"index puts it in identity {label}'s range (whose records carry {expected:g}); the .idx does "
                           "not match the .rec (offsets swapped or stale): rebuild it with pfd.data.recordio.build_index")

    def name(self, index: int) -> str:
        return f"{self.identities[self.labels[index]]}/{int(self.keys[index])}"


# -- writing (tests, small exports) --------------------------------------------------------------
def write_recordio(
    prefix_or_dir: str | os.PathLike,
    images: Iterable[Any],
    labels: Sequence[int],
    *,
    insightface_header: bool = True,
) -> Path:
    """Write a RecordIO set (``.rec`` + ``.idx``), atomically.

    Args:
        prefix_or_dir: A path ending in ``.rec`` (the index goes next to it), or a folder that
            receives ``train.rec`` and ``train.idx``.
        images: Encoded bytes (stored as is) or anything :func:`~pfd.data.images.encode_png`
            takes (stored as lossless PNG).
        labels: Integer identity of each image.
        insightface_header: Write the insightface layout (header record 0, images grouped by
            label, identity records); else the ``im2rec`` layout (keys ``0..n-1`` in input order).

    Returns:
        The ``.rec`` path.
    """
    p = Path(prefix_or_dir)
    rec = p if p.suffix == ".rec" else p / "train.rec"
    payloads = [encode_png(im) for im in images]
    labels = [int(y) for y in labels]
    if len(payloads) != len(labels):
        raise ValueError(f"{len(payloads)} images but {len(labels)} labels")
    records: list[bytes] = []
    if insightface_header:
        order = sorted(range(len(labels)), key=lambda i: labels[i])  # stable: images grouped by identity
        uniq = sorted(set(labels))
        img_end = len(order) + 1
        records.append(pack_record([img_end, img_end + len(uniq)], b""))
        records += [pack_record(float(labels[i]), payloads[i]) for i in order]
        start = 1
        for y in uniq:
            n = labels.count(y)
            records.append(pack_record([start, start + n], b""))
            start += n
    else:
        records = [pack_record(float(y), b) for y, b in zip(labels, payloads)]
    with atomic_open(rec, "wb") as f, atomic_open(rec.with_suffix(".idx"), "w") as fi:
        for key, r in enumerate(records):
            fi.write(f"{key}\t{f.tell()}\n")
            f.write(_frame(r))
    return rec
