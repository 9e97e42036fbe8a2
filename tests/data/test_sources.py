"""open_faces: spec resolution to the right FaceSet, and clear errors for everything else."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image

from pfd.data.faces import FaceFolder
from pfd.data.faceset import TensorFaces
from pfd.data.recordio import RecordIOFaces, write_recordio
from pfd.data.sources import DEFAULT_SIZE, open_faces
from pfd.errors import PfdError


def img(seed: int, s: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (s, s, 3), dtype=np.uint8)


def folder(root, spec):
    for j, (k, n) in enumerate(spec.items()):
        (root / k).mkdir(parents=True)
        for i in range(n):  # distinct photos per identity: a photo shared by two identities is refused
            Image.fromarray(img(1000 * j + i)).save(root / k / f"{i}.png")
    return root


def test_identity_folder(tmp_path):
    root = folder(tmp_path / "d", {"a": 2, "b": 1})
    faces = open_faces(root)
    assert isinstance(faces, FaceFolder) and faces.size == DEFAULT_SIZE
    assert faces[0][0].shape == (3, DEFAULT_SIZE, DEFAULT_SIZE)
    small = open_faces(str(root), size=8, min_images=2)
    assert small.identities == ["a"] and small.dropped == {"b": 1} and small[0][0].shape == (3, 8, 8)


def test_identity_folder_skip_bad_passes_through(tmp_path):
    root = folder(tmp_path / "d", {"a": 2})
    (root / "a" / "notes.txt").write_text("x")
    with pytest.raises(PfdError, match="notes.txt"):
        open_faces(root)
    assert set(open_faces(root, skip_bad=True).skipped) == {"a/notes.txt"}


@pytest.mark.parametrize("which", ["dir", "rec", "idx"])
def test_recordio_specs(tmp_path, which):
    write_recordio(tmp_path, [img(i) for i in range(5)], [0, 0, 1, 1, 2])
    spec = {"dir": tmp_path, "rec": tmp_path / "train.rec", "idx": tmp_path / "train.idx"}[which]
    faces = open_faces(spec, size=8)
    assert isinstance(faces, RecordIOFaces) and len(faces) == 5 and faces.num_classes == 3
    np.testing.assert_array_equal(np.rint(faces[4][0].permute(1, 2, 0).numpy() * 255), img(4))


def test_recordio_min_images(tmp_path):
    write_recordio(tmp_path, [img(i) for i in range(5)], [0, 0, 1, 1, 2])
    faces = open_faces(tmp_path, size=8, min_images=2)
    assert faces.num_classes == 2 and len(faces) == 4 and faces.dropped == {"2": 1}


def test_missing_path_lists_what_is_accepted(tmp_path):
    with pytest.raises(PfdError, match=r"nope: no such file or folder; pass an identity folder .*RecordIO.*synthetic:"):
        open_faces(tmp_path / "nope")


def test_unknown_file_is_an_error(tmp_path):
    (tmp_path / "faces.zip").write_bytes(b"PK")
    with pytest.raises(PfdError, match=r"faces\.zip: not a dataset; pass an identity folder"):
        open_faces(tmp_path / "faces.zip")


@pytest.mark.parametrize("name", ["lfw.bin", "pairs.txt"])
def test_pairs_file_is_not_a_dataset(tmp_path, name):
    (tmp_path / name).write_bytes(b"x")
    with pytest.raises(PfdError, match="verification-pairs file, not a training set"):
        open_faces(tmp_path / name)


def test_folder_with_idx_but_no_rec(tmp_path):
    (tmp_path / "train.idx").write_text("0\t0\n")
    with pytest.raises(PfdError, match="holds train.idx but not train.rec"):
        open_faces(tmp_path)


def test_synthetic_spec_is_delegated_lazily(monkeypatch):
    calls = []

    def open_synthetic(spec, *, size=None):
        calls.append((spec, size))
        return TensorFaces(torch.zeros(5, 3, 4, 4), [0, 0, 0, 1, 2], identities=["x", "y", "z"])

    monkeypatch.setitem(sys.modules, "pfd.data.synthetic", types.SimpleNamespace(open_synthetic=open_synthetic))
    faces = open_faces("synthetic:private,ids=3", size=4)
    assert calls == [("synthetic:private,ids=3", 4)] and len(faces) == 5
    filtered = open_faces("synthetic:test", min_images=2)
    assert calls[-1] == ("synthetic:test", None)
    assert filtered.identities == ["x"] and filtered.dropped == {"y": 1, "z": 1}
