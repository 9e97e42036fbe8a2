"""The privacy-utility benchmark's data layer: the CelebA split, spec resolution, adaptive pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from pu_data import SpecResolver, adaptive_pairs, celeba_split, pair_identities  # noqa: E402

from pfd.data.faceset import TensorFaces  # noqa: E402
from pfd.errors import PfdError  # noqa: E402

import torch  # noqa: E402


def _counts(n: int = 40, seed: int = 1) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    return {f"{7000 + k}": int(rng.integers(2, 25)) for k in range(n)}


def test_celeba_split_rule():
    counts = _counts()
    split = celeba_split(counts, seed=3, private=8, test=7, min_images=10)
    pub, priv, test = split["public"], split["private"], split["test"]
    assert len(priv) == 8 and len(test) == 7 and len(pub) == len(counts) - 15
    assert set(pub) | set(priv) | set(test) == set(counts)
    assert not (set(pub) & set(priv) or set(pub) & set(test) or set(priv) & set(test))
    assert all(counts[n] >= 10 for n in priv + test)
    assert all(v == sorted(v) for v in split.values())
    # every identity with < 10 images is public
    assert {n for n, c in counts.items() if c < 10} <= set(pub)
    # the rule as written: seeded permutation of the sorted eligible names
    eligible = sorted(n for n, c in counts.items() if c >= 10)
    order = np.random.default_rng(3).permutation(len(eligible))
    assert priv == sorted(eligible[i] for i in order[:8])
    assert test == sorted(eligible[i] for i in order[8:15])


def test_celeba_split_pure_and_seeded():
    counts = _counts()
    shuffled = dict(reversed(list(counts.items())))  # insertion order must not matter
    assert celeba_split(counts, seed=0, private=5, test=5) == celeba_split(shuffled, seed=0, private=5, test=5)
    assert celeba_split(counts, seed=0, private=5, test=5) != celeba_split(counts, seed=1, private=5, test=5)


def test_celeba_split_refuses_too_many():
    with pytest.raises(PfdError, match="only"):
        celeba_split({"a": 12, "b": 3, "c": 11}, private=1, test=2, min_images=10)


def _tree(root: Path, counts: dict[str, int]) -> None:
    rng = np.random.default_rng(0)
    for name, n in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(root / name / f"{i:03d}.png")


def test_resolver_celeba_parts_on_a_folder_tree(tmp_path):
    counts = {f"p{k:02d}": (12 if k < 8 else 3) for k in range(12)}
    _tree(tmp_path / "celeba-faces", counts)
    res = SpecResolver(tmp_path, size=16, celeba={"private": 3, "test": 3})
    parts = {p: res(f"celeba:{p}") for p in ("public", "private", "test")}
    split = celeba_split(counts, private=3, test=3)
    for p, faces in parts.items():
        assert sorted(faces.identities) == split[p]
        assert len(faces) == sum(counts[n] for n in split[p])
        assert faces.size == 16
    assert res.info["celeba"]["private"]["identities"] == 3
    assert res("celeba:test") is parts["test"]  # opened once


def test_resolver_plain_specs_and_errors(tmp_path):
    _tree(tmp_path / "mine", {"a": 3, "b": 2})
    res = SpecResolver(None, size=16)
    faces = res(str(tmp_path / "mine"))
    assert sorted(faces.identities) == ["a", "b"] and len(faces) == 5
    assert res("synthetic:test,ids=3,imgs=2").num_classes == 3
    with pytest.raises(PfdError, match="celeba-faces"):
        res("celeba:private")
    with pytest.raises(PfdError, match="unknown part"):
        SpecResolver(tmp_path, size=16)("celeba:other")


def _faces(sizes: list[int]) -> TensorFaces:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return TensorFaces(torch.zeros(len(labels), 3, 4, 4), labels)


def test_adaptive_pairs_takes_all_genuine_when_few():
    faces = _faces([3, 2, 4, 1])  # 3 + 1 + 6 + 0 = 10 genuine pairs
    pairs, info = adaptive_pairs(faces, num_pairs=500, seed=0)
    assert info["used"] == 10 and info["all_genuine"] and info["genuine_available"] == 10
    gen = {tuple(sorted(p)) for p in zip(pairs.left[pairs.issame], pairs.right[pairs.issame])}
    every = {(i, j) for i in range(len(faces)) for j in range(i + 1, len(faces)) if faces.labels[i] == faces.labels[j]}
    assert gen == every
    assert (~pairs.issame).sum() == 10
    li, ri = pair_identities(pairs)
    assert np.array_equal(li == ri, pairs.issame)


def test_adaptive_pairs_draws_when_plenty_and_refuses_tiny():
    faces = _faces([10] * 6)
    pairs, info = adaptive_pairs(faces, num_pairs=50, seed=1)
    assert info["used"] == 50 and not info["all_genuine"] and len(pairs) == 100
    with pytest.raises(PfdError, match="too few"):
        adaptive_pairs(_faces([2, 1]), num_pairs=50)


def test_shared_celeba_split_when_present():
    root = Path(__file__).resolve().parents[2] / "shared" / "data" / "celeba-faces"
    if not root.is_dir():
        pytest.skip("shared CelebA crops absent")
    counts = {p.name: sum(1 for _ in p.iterdir()) for p in root.iterdir() if p.is_dir()}
    split = celeba_split(counts)
    assert (len(split["private"]), len(split["test"])) == (72, 72)
    assert len(split["public"]) == len(counts) - 144
