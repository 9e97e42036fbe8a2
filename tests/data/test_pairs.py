"""Verification pairs: pairs.txt, insightface .bin (restricted unpickling), generated pairs."""

from __future__ import annotations

import os
import pickle
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from pfd.data.faceset import TensorFaces
from pfd.data.pairs import (
    VerificationPairs,
    read_bin,
    read_pairs_txt,
    write_bin,
)
from pfd.data.images import encode_png
from pfd.errors import PfdError


def img(seed: int, s: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (s, s, 3), dtype=np.uint8)


def pixels(t: torch.Tensor) -> np.ndarray:
    return np.rint(t.permute(1, 2, 0).numpy() * 255).astype(np.uint8)


def lfw_root(tmp_path, spec: dict[str, int], ext: str = "png"):
    root = tmp_path / "lfw"
    for name, n in spec.items():
        (root / name).mkdir(parents=True)
        for i in range(1, n + 1):
            Image.fromarray(img(zlib.crc32(name.encode()) % 1000 + i)).save(root / name / f"{name}_{i:04d}.{ext}")
    return root


# -- pairs.txt -------------------------------------------------------------------------------------
def test_lfw_pairs_txt(tmp_path):
    root = lfw_root(tmp_path, {"Ann_Lee": 3, "Bo": 1, "Cy": 2})
    (tmp_path / "pairs.txt").write_text("2\t2\nAnn_Lee\t1\t3\nCy 1 2\nAnn_Lee\t2\tBo\t1\n  # comment\nBo 1 Cy 2\n\n")
    p = read_pairs_txt(tmp_path / "pairs.txt", root=root, size=8)
    assert len(p) == 4
    np.testing.assert_array_equal(p.issame, [True, True, False, False])
    got = [(p.faces.name(a), p.faces.name(b)) for a, b in zip(p.left, p.right)]
    assert got == [("Ann_Lee/Ann_Lee_0001.png", "Ann_Lee/Ann_Lee_0003.png"), ("Cy/Cy_0001.png", "Cy/Cy_0002.png"),
                   ("Ann_Lee/Ann_Lee_0002.png", "Bo/Bo_0001.png"), ("Bo/Bo_0001.png", "Cy/Cy_0002.png")]
    assert len(p.faces) == 6  # Bo_0001 and Cy_0002 appear twice but are read once
    for a, b, same in zip(p.left, p.right, p.issame):
        assert (p.faces.labels[a] == p.faces.labels[b]) == same
    assert p.faces.identities == ["Ann_Lee", "Cy", "Bo"]
    np.testing.assert_array_equal(pixels(p.faces[p.left[1]][0]), img(zlib.crc32(b"Cy") % 1000 + 1))


def test_path_pairs_with_labels(tmp_path):
    root = lfw_root(tmp_path, {"a": 2, "b": 1}, ext="jpg")
    absolute = root / "b" / "b_0001.jpg"
    (tmp_path / "pairs.txt").write_text(f"a/a_0001.jpg a/a_0002.jpg 1\na/a_0001.jpg {absolute} 0\n")
    p = read_pairs_txt(tmp_path / "pairs.txt", root=root, size=8)
    np.testing.assert_array_equal(p.issame, [True, False])
    assert p.left[1] == p.left[0] and len(p.faces) == 3
    assert p.faces.identities[p.faces.labels[p.left[0]]] == "a"


def test_pairs_txt_missing_image_names_it(tmp_path):
    root = lfw_root(tmp_path, {"Ann": 2})
    (tmp_path / "pairs.txt").write_text("Ann 1 2\nAnn 1 7\n")
    with pytest.raises(PfdError, match=r"Ann/Ann_0007\.jpg: image of pairs\.txt line 2 not found"):
        read_pairs_txt(tmp_path / "pairs.txt", root=root)


def test_pairs_txt_bad_line_names_it(tmp_path):
    root = lfw_root(tmp_path, {"Ann": 2})
    (tmp_path / "pairs.txt").write_text("10 300\nAnn 1 2\nAnn one two three four\n")
    with pytest.raises(PfdError, match=r"pairs\.txt:3: cannot parse 'Ann one two three four'"):
        read_pairs_txt(tmp_path / "pairs.txt", root=root)


def test_pairs_txt_missing_file_or_root(tmp_path):
    with pytest.raises(PfdError, match="no such pairs file"):
        read_pairs_txt(tmp_path / "none.txt", root=tmp_path)
    (tmp_path / "pairs.txt").write_text("Ann 1 2\n")
    with pytest.raises(PfdError, match="image root for pairs.txt is not a folder"):
        read_pairs_txt(tmp_path / "pairs.txt", root=tmp_path / "nope")


# -- .bin ------------------------------------------------------------------------------------------
def test_bin_round_trip(tmp_path):
    arrs = [img(i) for i in range(6)]
    write_bin(tmp_path / "x.bin", arrs, [True, False, True])
    p = read_bin(tmp_path / "x.bin", size=8)
    assert len(p) == 3 and len(p.faces) == 6
    np.testing.assert_array_equal(p.left, [0, 2, 4])
    np.testing.assert_array_equal(p.right, [1, 3, 5])
    np.testing.assert_array_equal(p.issame, [True, False, True])
    for i in range(6):
        np.testing.assert_array_equal(pixels(p.faces[i][0]), arrs[i])
    lab = p.faces.labels
    assert lab[0] == lab[1] and lab[4] == lab[5] and lab[2] != lab[3] and len(set(lab.tolist())) == 4


def test_bin_python2_style_and_numpy_contents(tmp_path):
    arrs = [img(i) for i in range(4)]
    # protocol 2 stores bytes through _codecs.encode; numpy arrays as cv2.imencode would return them
    bins = [encode_png(arrs[0]), np.frombuffer(encode_png(arrs[1]), np.uint8), encode_png(arrs[2]),
            bytearray(encode_png(arrs[3]))]
    with open(tmp_path / "np.bin", "wb") as f:
        pickle.dump((bins, np.array([False, True])), f, protocol=2)
    p = read_bin(tmp_path / "np.bin", size=8)
    np.testing.assert_array_equal(p.issame, [False, True])
    for i in range(4):
        np.testing.assert_array_equal(pixels(p.faces[i][0]), arrs[i])
    with open(tmp_path / "scalars.bin", "wb") as f:  # a list of numpy bool scalars
        pickle.dump((bins, [np.bool_(True), np.bool_(False)]), f, protocol=4)
    np.testing.assert_array_equal(read_bin(tmp_path / "scalars.bin").issame, [True, False])


class _Evil:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_bin_refuses_arbitrary_globals(tmp_path):
    target = tmp_path / "pwned"
    with open(tmp_path / "evil.bin", "wb") as f:
        pickle.dump(([_Evil(target), b"x"], [True]), f, protocol=2)
    with pytest.raises(PfdError, match=r"evil\.bin: refused global (posix|os|nt)\.system"):
        read_bin(tmp_path / "evil.bin")
    assert not target.exists()


@pytest.mark.parametrize("content,match", [
    (pickle.dumps({"a": 1}), "expected a pickled"),
    (pickle.dumps(([b"x"], [True])), r"1 images for 1 pairs \(need 2\)"),
    (pickle.dumps(([b"x", 3], [True])), "image 1 is a int"),
    (pickle.dumps(([b"x", b"y"], [2.5])), "not booleans"),
    (pickle.dumps(([b"x", b"y"], [True]))[:-5], "not a readable .bin pickle"),
    (b"plain text", "not a readable .bin pickle"),
])
def test_bin_bad_contents(tmp_path, content, match):
    (tmp_path / "bad.bin").write_bytes(content)
    with pytest.raises(PfdError, match=match):
        read_bin(tmp_path / "bad.bin")


def test_bin_missing_file_and_bad_image(tmp_path):
    with pytest.raises(PfdError, match="no such .bin file"):
        read_bin(tmp_path / "lfw.bin")
    write_bin(tmp_path / "x.bin", [img(0), b"not an image"], [True])
    p = read_bin(tmp_path / "x.bin", size=8)
    with pytest.raises(PfdError, match=r"x\.bin#1: cannot decode image"):
        p.faces[1]


# -- the pair type ---------------------------------------------------------------------------------
def faces_of(sizes: list[int]) -> TensorFaces:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return TensorFaces(torch.zeros(len(labels), 3, 2, 2), labels)


def test_verification_pairs_validates():
    faces = faces_of([2, 2])
    assert len(VerificationPairs(faces, [0, 1], [2, 3], [0, 1])) == 2
    with pytest.raises(ValueError):
        VerificationPairs(faces, [0], [1, 2], [True])
    with pytest.raises(ValueError):
        VerificationPairs(faces, [0], [4], [True])


# -- inconsistent or odd pair files (issue 27) --------------------------------------------------------


def test_a_bin_with_more_images_than_pair_labels_is_an_error_not_a_dropped_pair(tmp_path):
    obj = ([encode_png(img(i)) for i in range(8)], [True, False, True])  # 8 images = 4 pairs, 3 labels
    with open(tmp_path / "x.bin", "wb") as f:
        pickle.dump(obj, f)
    with pytest.raises(PfdError, match="8 images for 3 pair labels .4 pairs need 4 labels.; the file is inconsistent"):
        read_bin(tmp_path / "x.bin", size=8)


def test_an_empty_bin_says_it_holds_no_pairs(tmp_path):
    with open(tmp_path / "e.bin", "wb") as f:
        pickle.dump(([], []), f)
    with pytest.raises(PfdError, match="holds no pairs"):
        read_bin(tmp_path / "e.bin", size=8)


def test_a_pairs_file_that_is_not_utf8_names_its_line(tmp_path):
    root = lfw_root(tmp_path, {"Ann": 2, "Bo": 1})
    (tmp_path / "pairs.txt").write_bytes(b"Ann 1 2\nJos\xe9 1 Bo 1\n")  # Latin-1 'e acute'
    with pytest.raises(PfdError, match=r"pairs.txt:2: not UTF-8 text \(byte 0xe9"):
        read_pairs_txt(tmp_path / "pairs.txt", root=root, size=8)


def test_an_impostor_line_naming_one_identity_twice_is_refused(tmp_path):
    root = lfw_root(tmp_path, {"Ann": 3, "Bo": 1})
    (tmp_path / "pairs.txt").write_text("Ann 1 2\nAnn 1 Ann 3\n")
    with pytest.raises(PfdError, match=r"pairs.txt:2: the impostor pair 'Ann 1 Ann 3' names 'Ann' twice"):
        read_pairs_txt(tmp_path / "pairs.txt", root=root, size=8)


def test_a_pairs_file_with_a_byte_order_mark_reads_its_header(tmp_path):
    root = lfw_root(tmp_path, {"Ann": 2, "Bo": 1})
    (tmp_path / "pairs.txt").write_bytes("\ufeff1 2\nAnn 1 2\nAnn 1 Bo 1\n".encode("utf-8"))
    assert len(read_pairs_txt(tmp_path / "pairs.txt", root=root, size=8)) == 2
