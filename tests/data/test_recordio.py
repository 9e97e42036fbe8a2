"""RecordIO: hand-built records, writer round trips, multi-part records, both layouts, bad input."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from pfd.data.recordio import (
    MAGIC,
    RecordIOFaces,
    RecordReader,
    build_index,
    pack_record,
    read_index,
    unpack_record,
    write_recordio,
)
from pfd.errors import PfdError


def png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def img(seed: int, s: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (s, s, 3), dtype=np.uint8)


def pixels(t: torch.Tensor) -> np.ndarray:
    return np.rint(t.permute(1, 2, 0).numpy() * 255).astype(np.uint8)


def frame(payload: bytes, cflag: int = 0) -> bytes:
    """One part exactly as the format describes it, written out by hand."""
    return struct.pack("<II", 0xCED7230A, (cflag << 29) | len(payload)) + payload + b"\0" * (-len(payload) % 4)


# -- hand-built files ------------------------------------------------------------------------------
def test_record_built_byte_by_byte_parses(tmp_path):
    arr = img(1)
    body = png(arr)
    payload = struct.pack("<IfQQ", 0, 7.0, 0, 0) + body  # flag 0: scalar label 7
    (tmp_path / "x.rec").write_bytes(frame(payload))
    (tmp_path / "x.idx").write_text("0\t0\n")
    faces = RecordIOFaces(tmp_path / "x.rec", size=8)
    assert faces.layout == "im2rec" and faces.identities == ["7"] and len(faces) == 1
    x, y = faces[0]
    assert y == 0
    np.testing.assert_array_equal(pixels(x), arr)


def test_insightface_layout_built_by_hand(tmp_path):
    a, b, c = img(1), img(2), img(3)
    recs = [
        struct.pack("<IfQQ", 2, 0.0, 0, 0) + struct.pack("<2f", 4, 6),  # header: img_end=4, id_end=6
        struct.pack("<IfQQ", 0, 0.0, 0, 0) + png(a),
        struct.pack("<IfQQ", 1, 0.0, 0, 0) + struct.pack("<f", 0.0) + png(b),  # label-array variant
        struct.pack("<IfQQ", 0, 1.0, 0, 0) + png(c),
        struct.pack("<IfQQ", 2, 0.0, 0, 0) + struct.pack("<2f", 1, 3),  # identity 0: keys 1, 2
        struct.pack("<IfQQ", 2, 0.0, 0, 0) + struct.pack("<2f", 3, 4),  # identity 1: key 3
    ]
    data, idx = b"", ""
    for key, r in enumerate(recs):
        idx += f"{key}\t{len(data)}\n"
        data += frame(r)
    (tmp_path / "train.rec").write_bytes(data)
    (tmp_path / "train.idx").write_text(idx)
    faces = RecordIOFaces(tmp_path, size=8)
    assert faces.layout == "insightface"
    assert faces.identities == ["0", "1"] and faces.keys.tolist() == [1, 2, 3]
    np.testing.assert_array_equal(faces.labels, [0, 0, 1])
    for i, want in enumerate((a, b, c)):
        np.testing.assert_array_equal(pixels(faces[i][0]), want)
    assert faces.name(2) == "1/3"


def test_multi_part_record_built_by_hand_is_reassembled(tmp_path):
    # The writer drops the magic word at each split; the reader must put it back.
    p1, p2, p3 = b"abcd" * 3, b"wxyz", b"tail!"
    data = frame(p1, 1) + frame(p2, 2) + frame(p3, 3) + frame(b"next", 0)
    (tmp_path / "m.rec").write_bytes(data)
    (tmp_path / "m.idx").write_text(f"0\t0\n1\t{len(data) - 12}\n")
    reader = RecordReader(tmp_path / "m.rec")
    magic = struct.pack("<I", MAGIC)
    assert reader.read(0) == p1 + magic + p2 + magic + p3
    assert reader.read(1) == b"next"
    build_index(tmp_path / "m.rec", idx_path=tmp_path / "rebuilt.idx")
    assert read_index(tmp_path / "rebuilt.idx") == read_index(tmp_path / "m.idx")


# -- writer round trips ----------------------------------------------------------------------------
def test_insightface_round_trip(tmp_path):
    arrs = [img(i) for i in range(7)]
    labels = [5, 2, 5, 9, 2, 5, 9]
    rec = write_recordio(tmp_path, arrs, labels)
    assert rec == tmp_path / "train.rec" and (tmp_path / "train.idx").is_file()
    faces = RecordIOFaces(tmp_path, size=8)
    assert faces.layout == "insightface" and faces.num_classes == 3 and len(faces) == 7
    # grouped by raw label in increasing order (2, 5, 9), input order kept inside a group
    expect = [i for y in (2, 5, 9) for i, lab in enumerate(labels) if lab == y]
    np.testing.assert_array_equal(faces.labels, [0, 0, 1, 1, 1, 2, 2])
    for i, j in enumerate(expect):
        np.testing.assert_array_equal(pixels(faces[i][0]), arrs[j])
    head, body = unpack_record(faces.reader.read(int(faces.keys[2])))
    assert head.flag == 0 and head.label == 5.0 and body[:8] == b"\x89PNG\r\n\x1a\n"


def test_im2rec_round_trip_with_tensor_images(tmp_path):
    ts = [torch.from_numpy(img(i)).permute(2, 0, 1).float() / 255 for i in range(4)]
    rec = write_recordio(tmp_path / "set.rec", ts, [3, 1, 3, 8], insightface_header=False)
    faces = RecordIOFaces(rec, size=8)
    assert faces.layout == "im2rec" and faces.identities == ["1", "3", "8"]
    np.testing.assert_array_equal(faces.labels, [1, 0, 1, 2])
    for i in range(4):
        assert torch.allclose(faces[i][0], ts[i], atol=0.5 / 255)


def test_payload_with_aligned_magic_round_trips_as_multi_part(tmp_path):
    arr = img(4)
    body = png(arr)
    body += b"\0" * (-(24 + len(body)) % 4)  # align, then embed the magic word: PNG ignores the tail
    body += struct.pack("<I", MAGIC) + b"1234" + struct.pack("<I", MAGIC) + b"xyz"
    rec = write_recordio(tmp_path, [body, img(5)], [0, 1], insightface_header=False)
    raw = rec.read_bytes()
    assert (struct.unpack_from("<I", raw, 4)[0] >> 29) == 1  # the writer really split the record
    reader = RecordReader(rec)
    head, got = unpack_record(reader.read(0))
    assert got == body and head.label == 0.0
    faces = RecordIOFaces(rec, size=8)
    np.testing.assert_array_equal(pixels(faces[0][0]), arr)
    np.testing.assert_array_equal(pixels(faces[1][0]), img(5))


def test_pack_unpack_label_array():
    rec = pack_record([3.0, 1.5], b"img", id=4, id2=9)
    head, body = unpack_record(rec)
    assert head.flag == 2 and head.label.tolist() == [3.0, 1.5] and (head.id, head.id2) == (4, 9)
    assert body == b"img"


# -- bad input -------------------------------------------------------------------------------------
def test_rec_without_idx_is_an_error_and_index_can_be_rebuilt(tmp_path):
    rec = write_recordio(tmp_path, [img(i) for i in range(3)], [0, 1, 1])
    original = read_index(tmp_path / "train.idx")
    (tmp_path / "train.idx").unlink()
    with pytest.raises(PfdError, match=r"train\.rec: its index .*train\.idx is missing; rebuild it with .*build_index"):
        RecordIOFaces(rec)
    build_index(rec)
    assert read_index(tmp_path / "train.idx") == original
    assert len(RecordIOFaces(rec, size=8)) == 3


def test_missing_rec_is_an_error(tmp_path):
    with pytest.raises(PfdError, match=r"nothing\.rec: no such RecordIO file"):
        RecordIOFaces(tmp_path / "nothing.rec")


def test_index_not_matching_rec_is_an_error(tmp_path):
    rec = write_recordio(tmp_path, [img(0), img(1)], [0, 1], insightface_header=False)
    (tmp_path / "train.idx").write_text("0\t0\n1\t6\n")
    with pytest.raises(PfdError, match=r"no record at byte 6 \(key 1\).*rebuild"):
        RecordIOFaces(rec)


def test_malformed_index_line_is_an_error(tmp_path):
    rec = write_recordio(tmp_path, [img(0)], [0])
    (tmp_path / "train.idx").write_text("0\t0\nbanana\n")
    with pytest.raises(PfdError, match=r"train\.idx:2: not a 'key<TAB>offset'"):
        RecordIOFaces(rec)


def test_truncated_rec_is_an_error(tmp_path):
    rec = write_recordio(tmp_path, [img(0), img(1)], [0, 1], insightface_header=False)
    rec.write_bytes(rec.read_bytes()[:-40])
    with pytest.raises(PfdError, match="truncated"):
        build_index(rec, idx_path=tmp_path / "new.idx")
    faces = RecordIOFaces(rec, size=8)  # labels come from header peeks; images are read lazily
    faces[0]
    with pytest.raises(PfdError, match="record 1 is truncated"):
        faces[1]


def test_undecodable_image_names_the_record(tmp_path):
    rec = write_recordio(tmp_path, [img(0), b"not an image"], [0, 1], insightface_header=False)
    faces = RecordIOFaces(rec, size=8)
    faces[0]
    with pytest.raises(PfdError, match=r"train\.rec record 1: cannot decode image"):
        faces[1]


def test_reader_survives_pickling(tmp_path):
    import pickle

    rec = write_recordio(tmp_path, [img(0), img(1)], [0, 1])
    faces = RecordIOFaces(rec, size=8)
    faces[0]  # opens the file
    clone = pickle.loads(pickle.dumps(faces))
    assert torch.equal(clone[1][0], faces[1][0])


# -- a damaged index (issue 27) --------------------------------------------------------------------


def test_swapped_index_offsets_are_caught_by_the_records_own_labels(tmp_path):
    arrs = [img(i) for i in range(6)]
    write_recordio(tmp_path, arrs, [0, 0, 0, 1, 1, 1])
    idx = tmp_path / "train.idx"
    rows = [line.split("\t") for line in idx.read_text().splitlines()]
    rows[2][1], rows[5][1] = rows[5][1], rows[2][1]  # key 2 (identity 0) <-> key 5 (identity 1)
    idx.write_text("".join(f"{k}\t{o}\n" for k, o in rows))
    faces = RecordIOFaces(tmp_path, size=8)
    with pytest.raises(PfdError, match="carries identity label .* in its header, but the index puts it in identity"):
        for i in range(len(faces)):
            faces[i]


def test_a_negative_index_offset_is_a_one_line_error(tmp_path):
    write_recordio(tmp_path, [img(i) for i in range(3)], [0, 1, 1])
    idx = tmp_path / "train.idx"
    lines = idx.read_text().splitlines()
    lines[1] = lines[1].split("\t")[0] + "\t-40"
    idx.write_text("\n".join(lines) + "\n")
    with pytest.raises(PfdError, match=r"train.idx:2: negative offset"):
        RecordIOFaces(tmp_path, size=8)
