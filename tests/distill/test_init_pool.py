"""Proxies that start from public faces: which photo seeds which proxy, and no private pixel ever."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from pfd.data.faceset import TensorFaces
from pfd.distill.init_pool import (InitPool, check_disjoint, checked_before, init_assignment, pool_check,
                                   record_pool_check)
from pfd.errors import PfdError
from pfd.release.private_copies import SEARCH_VERSION
from pfd.release.state_dir import StateDir, write_marker


def test_each_class_starts_as_one_public_person_with_distinct_photos():
    labels = np.repeat(np.arange(30), 12)  # 30 public people x 12 photos
    idx = init_assignment(labels, 24, 10, seed=0)
    assert idx.shape == (240,)
    people = labels[idx].reshape(24, 10)
    assert (people == people[:, :1]).all()  # a class's K proxies: one person
    assert len(set(people[:, 0])) == 24  # a different person for every class
    assert all(len(set(row)) == 10 for row in idx.reshape(24, 10))  # K distinct photos
    np.testing.assert_array_equal(idx, init_assignment(labels, 24, 10, seed=0))  # a pure function of the seed
    assert not np.array_equal(idx, init_assignment(labels, 24, 10, seed=1))


def test_a_small_pool_wraps_around(caplog):
    labels = np.repeat(np.arange(3), 2)  # 3 people x 2 photos for 5 classes of K = 4
    faces = TensorFaces(torch.rand(6, 3, 8, 8), labels, identities=[f"p{i}" for i in range(3)])
    pool = InitPool(faces, n_ids=5, k=4, seed=0)
    assert pool.index.shape == (20,) and set(pool.used) <= set(range(6))
    assert "2 classes share a starting person" in caplog.text and "fewer than K = 4" in caplog.text
    imgs = pool.images(np.array([0, 5, 19]))
    assert imgs.shape == (3, 3, 8, 8) and torch.equal(imgs[0], faces.load(int(pool.index[0])))


def _faces(seed: int, n_ids: int = 4, per: int = 3) -> TensorFaces:
    x = torch.rand(n_ids * per, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
    return TensorFaces(x, np.repeat(np.arange(n_ids), per), identities=[f"id{seed}-{i}" for i in range(n_ids)])


def test_a_pool_holding_a_private_photo_is_refused_exact_or_edited():
    private, pool = _faces(1), _faces(2)
    check_disjoint(pool, private, pool_spec="public/", private_spec="private/")  # disjoint: fine
    leaked = pool.images.clone()
    leaked[5] = private.images[7]  # a private photo in the pool
    with pytest.raises(PfdError, match=r"is private photo .* \(exact;.*never private ones"):
        check_disjoint(TensorFaces(leaked, pool.labels, identities=pool.identities), private, pool_spec="public/", private_spec="p/")
    edited = pool.images.clone()
    edited[2] = (private.images[0] * 1.15).clamp(0, 1)  # brightened: a perceptual near-duplicate
    with pytest.raises(PfdError, match="near-duplicate"):
        check_disjoint(TensorFaces(edited, pool.labels, identities=pool.identities), private, pool_spec="public/", private_spec="p/")
    # Only the photos that seed a proxy need checking: the leaked one unused passes.
    check_disjoint(TensorFaces(leaked, pool.labels, identities=pool.identities), private, pool_spec="public/", private_spec="p/",
                   used=np.array([0, 1, 2]))


def test_a_passed_pool_check_stands_only_for_the_same_pixels_private_set_and_search(tmp_path):
    """Issue 57: a --resume at 10^4 identities searched the same pool again (~0.1 s a photo)."""
    write_marker(tmp_path, "run")
    pool = _faces(2)
    key = pool_check(pool, None, private_sha="abc")
    assert key["search"] == SEARCH_VERSION and not checked_before(tmp_path, key)
    record_pool_check(tmp_path, key)
    assert checked_before(tmp_path, key)
    renamed = TensorFaces(pool.images.clone(), pool.labels, identities=[f"x{i}" for i in range(4)])
    assert checked_before(tmp_path, pool_check(renamed, None, private_sha="abc"))  # pixels, not names
    edited = pool.images.clone()
    edited[3, 0, 5, 5] = 1.0 - edited[3, 0, 5, 5]  # one pixel of one photo
    assert not checked_before(tmp_path, pool_check(TensorFaces(edited, pool.labels, identities=pool.identities), None,
                                                   private_sha="abc"))
    assert not checked_before(tmp_path, pool_check(pool, None, private_sha="abd"))  # another private set
    assert not checked_before(tmp_path, pool_check(pool, np.array([0, 1]), private_sha="abc"))  # other photos used
    path = StateDir.at(tmp_path).init_pool_check
    assert path.stat().st_mode & 0o777 == 0o600
    path.write_text(path.read_text().replace(key["pool"], "0" * 64))  # a record edited by hand
    with pytest.raises(PfdError, match="edited or replaced after the run wrote it"):
        checked_before(tmp_path, key)


def test_the_private_folder_or_one_inside_it_is_refused_as_a_pool(tmp_path):
    for d in ("faces/a", "faces/b"):
        (tmp_path / d).mkdir(parents=True)
        Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / d / "0.png")
    faces = _faces(3)
    for spec in (tmp_path / "faces", tmp_path / "faces" / "a"):
        with pytest.raises(PfdError, match="overlap"):
            check_disjoint(faces, faces, pool_spec=str(spec), private_spec=str(tmp_path / "faces"))
    with pytest.raises(PfdError, match="is the private set"):
        check_disjoint(faces, faces, pool_spec="synthetic:private", private_spec="synthetic:private")


def _u8(x: torch.Tensor) -> torch.Tensor:
    return (x * 255).round().clamp(0, 255) / 255  # what an image file holds


@pytest.mark.parametrize("edit", ["rolled 4 px", "cropped 3 px and resized back", "rotated 10 degrees"])
def test_a_pool_of_edited_private_photos_is_refused(edit):
    """Issue 34: pools of private photos rolled 4 px, cropped 3 px and resized back, or rotated 10° were
    accepted (only exact copies and perceptual near-duplicates were searched); a proxy started from one
    kept a pixel correlation of 0.79 with its private photo through RTA."""
    import torchvision.transforms.functional as TF
    from pfd.data.sources import open_faces

    private = open_faces("synthetic:private,ids=6,imgs=4,size=64")
    public = open_faces("synthetic:test,ids=6,imgs=4,size=64")
    pool = torch.stack([public.load(i) for i in range(len(public))])  # (24, 3, 64, 64)
    check_disjoint(TensorFaces(pool, public.labels, identities=public.identities), private,
                   pool_spec="public/", private_spec="private/")  # other people: fine
    photo = private.load(9)
    edits = {"rolled 4 px": lambda x: torch.roll(x, shifts=(4, 4), dims=(1, 2)),
             "cropped 3 px and resized back": lambda x: torch.nn.functional.interpolate(
                 x[None, :, 3:-3, 3:-3], size=(64, 64), mode="bilinear", align_corners=False)[0],
             "rotated 10 degrees": lambda x: TF.rotate(x, 10.0, interpolation=TF.InterpolationMode.BILINEAR)}
    leaked = pool.clone()
    leaked[13] = _u8(edits[edit](photo))
    with pytest.raises(PfdError, match=r"^--init-data public/: .* is private photo .*"
                                       + "(near-duplicate|aligned|transformed).*remove them from the pool$"):
        check_disjoint(TensorFaces(leaked, public.labels, identities=public.identities), private,
                       pool_spec="public/", private_spec="private/")
