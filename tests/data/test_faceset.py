"""FaceSet views: subsets re-number labels consistently; ConcatFaces keeps label spaces disjoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pfd.data.faceset import ConcatFaces, TensorFaces


def _faces(n_ids: int, per: int, size: int = 8, seed: int = 0) -> TensorFaces:
    g = torch.Generator().manual_seed(seed)
    imgs = torch.rand(n_ids * per, 3, size, size, generator=g)
    labels = np.repeat(np.arange(n_ids), per)
    return TensorFaces(imgs, labels, identities=[f"p{k}" for k in range(n_ids)])


def test_subset_relabels_in_old_label_order():
    f = _faces(5, 3)
    sub = f.select_identities([4, 1])
    assert sub.identities == ["p1", "p4"]
    assert sub.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert sub.parent_labels.tolist() == [1, 4]
    img, lab = sub[4]
    assert lab == 1 and torch.equal(img, f[13][0])
    assert sub.name(0) == f.name(3)


def test_subset_without_relabel_keeps_labels():
    f = _faces(4, 2)
    sub = f.subset([7, 0], relabel=False)
    assert sub.labels.tolist() == [3, 0] and sub.num_classes == 4


def test_concat_disjoint_label_spaces():
    a, b = _faces(3, 2, seed=1), _faces(2, 4, seed=2)
    c = ConcatFaces([a, b])
    assert c.num_classes == 5 and len(c) == 14
    assert c.labels.tolist() == [0, 0, 1, 1, 2, 2] + [3] * 4 + [4] * 4
    assert c.identities[3] == "1:p0"
    img, lab = c[6]
    assert lab == 3 and torch.equal(img, b[0][0])
    assert c.name(6).startswith("1:")


def test_concat_rejects_mixed_sizes():
    with pytest.raises(ValueError, match="image size"):
        ConcatFaces([_faces(2, 2, size=8), _faces(2, 2, size=16)])


def test_to_memory_keeps_pixels_names_and_attributes():
    from pfd.data.faceset import TensorFaces, to_memory
    from pfd.data.synthetic import SyntheticFaces

    faces = SyntheticFaces("private", identities=3, images_per_identity=2, size=16)
    mem = to_memory(faces)
    assert isinstance(mem, TensorFaces) and len(mem) == 6
    assert all(torch.equal(mem.load(i), faces.load(i)) and mem.name(i) == faces.name(i) for i in range(6))
    assert mem.identities == faces.identities and mem.attributes == faces.attributes
    assert np.array_equal(mem.labels, faces.labels)
    assert to_memory(faces, max_bytes=100) is faces  # too large: left lazy
    assert to_memory(mem) is mem


def test_hw_is_the_height_and_width_of_what_load_returns():
    faces = TensorFaces(torch.zeros(2, 3, 24, 20), np.array([0, 1]))
    assert faces.hw == (24, 20) == tuple(faces.load(0).shape[-2:])
    square = TensorFaces(torch.zeros(1, 3, 16, 16), np.array([0]))
    assert square.size == 16 and square.hw == (16, 16)
