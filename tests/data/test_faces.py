"""Identity folders: formats, conversions, ordering, bad input, filters, splits, loader."""

from __future__ import annotations

import logging
import os
import random
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from pfd.data.faces import (
    FaceFolder,
    check_min_images,
    drop_small_identities,
    make_loader,
    natural_key,
    split_identities,
    split_images,
)
from pfd.data.faceset import TensorFaces
from pfd.errors import PfdError

RNG = np.random.default_rng(0)


def rgb(h: int = 8, w: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def save(path: Path, arr: np.ndarray | Image.Image, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = arr if isinstance(arr, Image.Image) else Image.fromarray(arr)
    img.save(path, **kw)
    return path


def make_folder(root: Path, spec: dict[str, int], *, size: int = 8, order_seed: int = 0) -> Path:
    """Write ``{identity: n_images}`` as PNGs, creating files in a shuffled order."""
    jobs = [(k, i) for k, n in spec.items() for i in range(n)]
    random.Random(order_seed).shuffle(jobs)
    for k, i in jobs:
        save(root / k / f"img{i}.png", rgb(size, size, seed=zlib.crc32(f"{k}/{i}".encode())))
    for k, n in spec.items():
        (root / k).mkdir(parents=True, exist_ok=True)
    return root


def pixels(t: torch.Tensor) -> np.ndarray:
    return np.rint(t.permute(1, 2, 0).numpy() * 255).astype(np.uint8)


# -- layout and order ------------------------------------------------------------------------------
def test_order_is_natural_and_independent_of_creation_order(tmp_path):
    spec = {"id10": 3, "id2": 2, "id1": 12, "Zed": 1}
    a = FaceFolder(make_folder(tmp_path / "a", spec, order_seed=1), size=8)
    b = FaceFolder(make_folder(tmp_path / "b", spec, order_seed=2), size=8)
    assert a.identities == ["Zed", "id1", "id2", "id10"]  # natural order, ids by value
    assert a.names == b.names
    assert a.names[1:13] == [f"id1/img{i}" + ".png" for i in range(12)]  # img2 before img10
    np.testing.assert_array_equal(a.labels, [0] + [1] * 12 + [2] * 2 + [3] * 3)
    for i in (0, 5, len(a) - 1):
        assert torch.equal(a[i][0], b[i][0]) and a[i][1] == b[i][1]


def test_natural_key_orders_digit_runs_by_value():
    names = ["a10", "a2", "a1", "b", "a02"]
    assert sorted(names, key=natural_key) == ["a1", "a02", "a2", "a10", "b"]


def test_png_round_trip_keeps_pixels(tmp_path):
    arr = rgb(8, 8, seed=3)
    save(tmp_path / "p" / "0.png", arr)
    x, y = FaceFolder(tmp_path, size=8)[0]
    assert x.dtype == torch.float32 and x.shape == (3, 8, 8) and y == 0
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    np.testing.assert_array_equal(pixels(x), arr)


def test_resized_to_configured_size(tmp_path):
    arr = np.zeros((16, 16, 3), np.uint8)
    arr[:, :8] = (200, 10, 50)  # left half coloured, right half black
    save(tmp_path / "p" / "0.png", arr)
    x, _ = FaceFolder(tmp_path, size=4)[0]
    assert x.shape == (3, 4, 4)
    np.testing.assert_allclose(x[:, :, 0].T, np.tile([200 / 255, 10 / 255, 50 / 255], (4, 1)), atol=1 / 255)
    assert float(x[:, :, 3].max()) == 0.0


def test_non_square_sources_warn_once_per_dataset(tmp_path, caplog):
    save(tmp_path / "p" / "0.png", rgb(8, 12))
    save(tmp_path / "p" / "1.png", rgb(10, 6))
    with caplog.at_level(logging.WARNING, logger="pfd"):
        faces = FaceFolder(tmp_path, size=8)
        for i in range(len(faces)):
            assert faces[i][0].shape == (3, 8, 8)
        again = FaceFolder(tmp_path, size=8)
        again[0], again[1]
    msgs = [r.getMessage() for r in caplog.records if "not square" in r.getMessage()]
    assert len(msgs) == 2  # one per dataset, not one per image
    assert "12x8" in msgs[0]


def test_square_sources_do_not_warn(tmp_path, caplog):
    save(tmp_path / "p" / "0.png", rgb(12, 12))
    with caplog.at_level(logging.WARNING, logger="pfd"):
        FaceFolder(tmp_path, size=8)[0]
    assert not [r for r in caplog.records if "not square" in r.getMessage()]


# -- conversions -----------------------------------------------------------------------------------
def test_greyscale_becomes_rgb(tmp_path):
    grey = RNG.integers(0, 256, (8, 8), dtype=np.uint8)
    save(tmp_path / "p" / "0.png", grey)
    save(tmp_path / "p" / "1.pgm", grey)
    faces = FaceFolder(tmp_path, size=8)
    for i in range(2):
        out = pixels(faces[i][0])
        for c in range(3):
            np.testing.assert_array_equal(out[..., c], grey)


def test_rgba_is_composited_on_black(tmp_path):
    arr = np.zeros((8, 8, 4), np.uint8)
    arr[..., :3] = (255, 128, 64)
    arr[:4, :, 3] = 255  # opaque top half
    arr[4:, :, 3] = 0  # transparent bottom half (colour underneath must not leak)
    save(tmp_path / "p" / "0.png", arr)
    out = pixels(FaceFolder(tmp_path, size=8)[0][0])
    np.testing.assert_array_equal(out[:4], np.broadcast_to([255, 128, 64], (4, 8, 3)))
    np.testing.assert_array_equal(out[4:], 0)


def test_gif_palette_becomes_rgb(tmp_path):
    arr = np.zeros((8, 8, 3), np.uint8)
    arr[:, :4] = (255, 0, 0)
    arr[:, 4:] = (0, 0, 255)
    pal = Image.fromarray(arr).quantize(colors=2)
    assert pal.mode == "P"
    save(tmp_path / "p" / "0.gif", pal)
    out = pixels(FaceFolder(tmp_path, size=8)[0][0])
    np.testing.assert_array_equal(out, arr)


def test_16bit_greyscale_is_scaled_not_clipped(tmp_path):
    arr16 = np.full((8, 8), 65535, np.uint16)
    arr16[:, 4:] = 32768
    save(tmp_path / "p" / "0.png", Image.fromarray(arr16))
    x = FaceFolder(tmp_path, size=8)[0][0]
    np.testing.assert_allclose(x[:, :, :4].numpy(), 1.0)
    np.testing.assert_allclose(x[:, :, 4:].numpy(), 128 / 255, atol=1 / 255)


def test_exif_orientation_is_applied(tmp_path):
    arr = np.zeros((8, 8, 3), np.uint8)
    arr[0, :] = 255  # white top row
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    save(tmp_path / "p" / "0.png", Image.fromarray(arr), exif=exif)
    out = pixels(FaceFolder(tmp_path, size=8)[0][0])
    np.testing.assert_array_equal(out, np.rot90(arr, k=-1))  # the top row is now the right column


@pytest.mark.parametrize("ext", ["jpg", "JPEG", "png", "PNG", "pgm", "ppm", "gif", "bmp", "webp", "tif"])
def test_every_accepted_extension_loads(tmp_path, ext):
    arr = np.full((8, 8, 3), (30, 160, 220), np.uint8)
    img = Image.fromarray(arr)
    if ext == "pgm":
        img = img.convert("L")
    kw = {"format": {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF", "pgm": "PPM"}.get(ext.lower(), ext.upper())}
    if ext == "webp":
        kw["lossless"] = True
    save(tmp_path / "p" / f"0.{ext}", img, **kw)
    x = pixels(FaceFolder(tmp_path, size=8)[0][0])
    want = np.asarray(img.convert("RGB"))
    tol = 3 if ext.lower() in ("jpg", "jpeg") else 0
    assert np.abs(x.astype(int) - want.astype(int)).max() <= tol


# -- junk and bad input ----------------------------------------------------------------------------
def test_hidden_files_os_junk_and_root_metadata_are_ignored(tmp_path):
    make_folder(tmp_path, {"alice": 2})
    (tmp_path / "alice" / ".DS_Store").write_bytes(b"\0junk")
    (tmp_path / "alice" / "._img0.png").write_bytes(b"appledouble")
    (tmp_path / "alice" / "Thumbs.db").write_bytes(b"junk")
    (tmp_path / ".cache").mkdir()
    (tmp_path / "__MACOSX").mkdir()
    (tmp_path / "manifest.json").write_text("{}")
    faces = FaceFolder(tmp_path, size=8)
    assert faces.identities == ["alice"] and faces.names == ["alice/img0.png", "alice/img1.png"]
    assert faces.skipped == {}


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(PfdError, match=r"nope: no such folder.*root/<identity>/<image>"):
        FaceFolder(tmp_path / "nope")


def test_a_file_is_not_an_identity_folder(tmp_path):
    f = save(tmp_path / "x.png", rgb())
    with pytest.raises(PfdError, match=r"x\.png: not a folder"):
        FaceFolder(f)


def test_images_directly_in_root_are_an_error(tmp_path):
    save(tmp_path / "a.png", rgb())
    save(tmp_path / "b.png", rgb())
    with pytest.raises(PfdError, match=r"holds 2 images directly \(e\.g\. a\.png\).*own folder") as e:
        FaceFolder(tmp_path)
    assert "\n" not in str(e.value)


def test_folder_without_identities_is_an_error(tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(PfdError, match="no identity folders found"):
        FaceFolder(tmp_path)


def test_image_beside_identity_folders_is_an_error(tmp_path):
    make_folder(tmp_path, {"alice": 1})
    save(tmp_path / "stray.jpg", rgb())
    with pytest.raises(PfdError, match=r"stray\.jpg: image outside any identity folder.*--skip-bad"):
        FaceFolder(tmp_path)


def test_empty_identity_folder_is_an_error(tmp_path):
    make_folder(tmp_path, {"alice": 2, "bob": 0})
    with pytest.raises(PfdError, match=r"/bob: empty identity folder; add its images or delete"):
        FaceFolder(tmp_path)


def test_stray_non_image_file_is_an_error(tmp_path):
    make_folder(tmp_path, {"alice": 2})
    (tmp_path / "alice" / "notes.txt").write_text("who is this")
    with pytest.raises(PfdError, match=r"alice/notes\.txt: not an image file \(\.txt; accepted: .*--skip-bad"):
        FaceFolder(tmp_path)


def test_folder_inside_identity_is_an_error(tmp_path):
    make_folder(tmp_path, {"alice": 1})
    save(tmp_path / "alice" / "more" / "0.png", rgb())
    with pytest.raises(PfdError, match=r"alice/more: folder inside an identity folder"):
        FaceFolder(tmp_path)


def test_corrupt_image_fails_at_load_naming_the_file(tmp_path):
    make_folder(tmp_path, {"alice": 2})
    (tmp_path / "alice" / "img1.png").write_bytes(b"this is not a png")
    faces = FaceFolder(tmp_path, size=8)  # lazy: listing does not decode
    faces[0]
    with pytest.raises(PfdError, match=r"alice/img1\.png: cannot decode image .*--skip-bad"):
        faces[1]
    with pytest.raises(PfdError, match=r"alice/img1\.png: cannot decode image"):
        faces.verify()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated_image_is_caught_upfront_and_at_load(tmp_path, fmt):
    make_folder(tmp_path, {"alice": 1})
    path = tmp_path / "alice" / f"cut.{fmt.lower()}"
    save(path, rgb(32, 32), format=fmt)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(PfdError, match=rf"cut\.{fmt.lower()}: cannot decode image"):
        FaceFolder(tmp_path, size=8, validate=True)
    faces = FaceFolder(tmp_path, size=8)
    with pytest.raises(PfdError, match=rf"cut\.{fmt.lower()}: cannot decode image"):
        faces[faces.names.index(f"alice/cut.{fmt.lower()}")]


def test_skip_bad_skips_counts_and_logs(tmp_path, caplog):
    make_folder(tmp_path, {"alice": 3, "bob": 2, "carol": 0})
    (tmp_path / "alice" / "img1.png").write_bytes(b"garbage")
    (tmp_path / "bob" / "notes.txt").write_text("x")
    save(tmp_path / "loose.png", rgb())
    with caplog.at_level(logging.WARNING, logger="pfd"):
        faces = FaceFolder(tmp_path, size=8, skip_bad=True)
    assert set(faces.skipped) == {"alice/img1.png", "bob/notes.txt", "carol/", "loose.png"}
    assert "cannot decode" in faces.skipped["alice/img1.png"]
    assert faces.identities == ["alice", "bob"]
    assert faces.names == ["alice/img0.png", "alice/img2.png", "bob/img0.png", "bob/img1.png"]
    np.testing.assert_array_equal(faces.labels, [0, 0, 1, 1])
    assert any("skipped 4 bad entries" in r.getMessage() for r in caplog.records)
    assert all(faces[i][0].shape == (3, 8, 8) for i in range(len(faces)))


def test_skip_bad_identity_left_empty_is_skipped(tmp_path):
    make_folder(tmp_path, {"alice": 1, "bob": 1})
    (tmp_path / "bob" / "img0.png").write_bytes(b"garbage")
    faces = FaceFolder(tmp_path, size=8, skip_bad=True)
    assert faces.identities == ["alice"] and "bob/" in faces.skipped


# -- minimum images --------------------------------------------------------------------------------
def test_min_images_drops_and_reports(tmp_path, caplog):
    make_folder(tmp_path, {"alice": 3, "bob": 1, "carol": 2, "dave": 4})
    with caplog.at_level(logging.WARNING, logger="pfd"):
        faces = FaceFolder(tmp_path, size=8, min_images=3)
    assert faces.dropped == {"bob": 1, "carol": 2}
    assert faces.identities == ["alice", "dave"]
    np.testing.assert_array_equal(faces.counts(), [3, 4])
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "dropped 2 identities" in msg and "bob (1)" in msg and "carol (2)" in msg


def test_min_images_leaving_nothing_is_an_error(tmp_path):
    make_folder(tmp_path, {"alice": 2, "bob": 1})
    with pytest.raises(PfdError, match=r"no identity has at least 5 images \(largest has 2\); lower --min-images"):
        FaceFolder(tmp_path, size=8, min_images=5)


def test_check_min_images_names_identity_and_fixes(tmp_path):
    faces = FaceFolder(make_folder(tmp_path, {"alice": 12, "bob": 3, "carol": 2}), size=8)
    check_min_images(faces, 2)  # everybody has 2
    with pytest.raises(PfdError) as e:
        check_min_images(faces, 10, need="K=10 proxies per class need at least 10", fix="lower --ipc")
    msg = str(e.value)
    assert msg.startswith("identity 'bob' has 3 images but K=10 proxies per class need at least 10")
    assert "1 other identities are short" in msg and "lower --ipc" in msg and "--min-images 10" in msg


def test_drop_small_identities_on_any_faceset():
    faces = TensorFaces(torch.zeros(6, 3, 4, 4), [0, 0, 0, 1, 2, 2], identities=["a", "b", "c"])
    out = drop_small_identities(faces, 2)
    assert out.identities == ["a", "c"] and out.dropped == {"b": 1}
    np.testing.assert_array_equal(out.labels, [0, 0, 0, 1, 1])
    assert drop_small_identities(faces, 1) is faces
    with pytest.raises(PfdError, match="no identity has at least 4 images"):
        drop_small_identities(faces, 4)


def test_attributes_csv_is_read(tmp_path):
    make_folder(tmp_path, {"alice": 1, "bob": 1})
    (tmp_path / "attributes.csv").write_text("identity,tone,hair\nalice,2,0\nbob,1,1\nzoe,0,0\n")
    faces = FaceFolder(tmp_path, size=8)
    assert faces.attributes == {"alice": {"tone": 2, "hair": 0}, "bob": {"tone": 1, "hair": 1}}


# -- splits ----------------------------------------------------------------------------------------
def _tensor_faces(n_ids: int, per: int | list[int]) -> TensorFaces:
    per = [per] * n_ids if isinstance(per, int) else per
    labels = np.repeat(np.arange(n_ids), per)
    return TensorFaces(torch.rand(len(labels), 3, 4, 4), labels, identities=[f"p{k}" for k in range(n_ids)])


def test_split_identities_disjoint_complete_and_seeded():
    faces = _tensor_faces(20, 3)
    parts = split_identities(faces, fractions=[0.7, 0.3], seed=5)
    assert [p.num_classes for p in parts] == [14, 6]
    ids = [set(p.identities) for p in parts]
    assert not ids[0] & ids[1] and ids[0] | ids[1] == set(faces.identities)
    for p in parts:  # relabelled 0..n-1, every image of a kept identity present
        assert set(p.labels.tolist()) == set(range(p.num_classes)) and len(p) == 3 * p.num_classes
        assert all(faces.identities[faces.labels[j]] == p.identities[p.labels[i]] for i, j in enumerate(p.indices))
    again = split_identities(faces, fractions=[0.7, 0.3], seed=5)
    assert [p.identities for p in again] == [p.identities for p in parts]
    other = split_identities(faces, fractions=[0.7, 0.3], seed=6)
    assert [p.identities for p in other] != [p.identities for p in parts]


def test_split_identities_by_counts_may_leave_a_remainder():
    parts = split_identities(_tensor_faces(10, 2), counts=[3, 4], seed=0)
    assert [p.num_classes for p in parts] == [3, 4]
    assert not set(parts[0].identities) & set(parts[1].identities)


def test_split_fraction_ties_do_not_empty_a_part():
    parts = split_identities(_tensor_faces(10, 1), fractions=[0.95, 0.05], seed=0)  # 9.5 : 0.5
    assert [p.num_classes for p in parts] == [9, 1]


@pytest.mark.parametrize("kw", [{"counts": [6, 5]}, {"fractions": [0.8, 0.3]}, {"fractions": [0.98, 0.01]}])
def test_split_identities_that_do_not_fit_are_errors(kw):
    with pytest.raises(PfdError):
        split_identities(_tensor_faces(10, 2), seed=0, **kw)


def test_split_images_per_identity_seeded_and_stable():
    faces = _tensor_faces(5, [4, 6, 3, 5, 3])
    chosen, rest = split_images(faces, per_identity=2, seed=1)
    np.testing.assert_array_equal(chosen.counts(), [2] * 5)
    np.testing.assert_array_equal(rest.counts(), [2, 4, 1, 3, 1])
    assert not set(chosen.indices) & set(rest.indices)
    assert sorted([*chosen.indices, *rest.indices]) == list(range(len(faces)))
    np.testing.assert_array_equal(chosen.labels, faces.labels[chosen.indices])  # labels kept
    again, _ = split_images(faces, per_identity=2, seed=1)
    np.testing.assert_array_equal(again.indices, chosen.indices)
    # dropping another identity does not change this identity's choice
    sub = faces.select_identities([0, 1, 3])
    sub_chosen, _ = split_images(sub, per_identity=2, seed=1)
    assert {sub.name(i) for i in sub_chosen.indices if sub.labels[i] == 2} == {
        faces.name(i) for i in chosen.indices if faces.labels[i] == 3}


def test_split_images_too_few_is_an_error():
    with pytest.raises(PfdError, match=r"identity 'p2' has 3 images, fewer than per_identity=4"):
        split_images(_tensor_faces(3, [4, 5, 3]), per_identity=4, seed=0)


# -- loader ----------------------------------------------------------------------------------------
def test_make_loader_is_reproducible_and_batches():
    faces = _tensor_faces(6, 3)
    order = lambda seed: torch.cat([y for _, y in make_loader(faces, batch_size=4, shuffle=True, seed=seed)])
    a, b = order(3), order(3)
    assert torch.equal(a, b) and sorted(a.tolist()) == sorted(faces.labels.tolist())
    assert not torch.equal(order(3), order(4))
    batches = list(make_loader(faces, batch_size=4, shuffle=False, drop_last=True))
    assert len(batches) == 4 and batches[0][0].shape == (4, 3, 4, 4)
    loader = make_loader(faces, batch_size=4, shuffle=False)
    assert loader.pin_memory == torch.cuda.is_available()


def test_make_loader_with_a_worker_matches_main_process(tmp_path):
    faces = FaceFolder(make_folder(tmp_path, {"a": 3, "b": 2}), size=8)
    loader = make_loader(faces, batch_size=2, shuffle=True, workers=1, seed=7)
    assert loader.persistent_workers
    x1 = torch.cat([x for x, _ in loader])
    x0 = torch.cat([x for x, _ in make_loader(faces, batch_size=2, shuffle=True, workers=0, seed=7)])
    assert torch.equal(x0, x1)
    del loader


# -- folders skipped for their names, symlinked identities, too few identities ----------------
def test_folders_skipped_for_their_names_are_listed_at_info(tmp_path, caplog):
    make_folder(tmp_path, {"alice": 2, "bob": 2})
    (tmp_path / ".cache").mkdir()
    (tmp_path / "__MACOSX").mkdir()
    with caplog.at_level(logging.INFO, logger="pfd.data.faces"):
        faces = FaceFolder(tmp_path, size=8)
    assert faces.identities == ["alice", "bob"]
    text = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    assert ".cache/ (hidden name)" in text and "__MACOSX/ (operating-system folder)" in text


def test_symlinked_identity_to_a_listed_identity_is_an_error(tmp_path):
    make_folder(tmp_path / "set", {"alice": 2, "bob": 2})
    (tmp_path / "set" / "alice_again").symlink_to(tmp_path / "set" / "alice", target_is_directory=True)
    with pytest.raises(PfdError, match=r"alice_again: a symlink to the same folder as identity 'alice'"):
        FaceFolder(tmp_path / "set", size=8)
    # A symlink to a folder outside the set is an identity like any other.
    make_folder(tmp_path / "elsewhere", {"carol": 2})
    (tmp_path / "set" / "alice_again").unlink()
    (tmp_path / "set" / "carol").symlink_to(tmp_path / "elsewhere" / "carol", target_is_directory=True)
    assert FaceFolder(tmp_path / "set", size=8).identities == ["alice", "bob", "carol"]


def test_check_min_identities():
    from pfd.data.faces import check_min_identities

    one = TensorFaces(torch.rand(3, 3, 8, 8), [0, 0, 0], identities=["solo"])
    with pytest.raises(PfdError, match="a release needs at least 2 identities, the data has 1"):
        check_min_identities(one, 2, what="a release")
    check_min_identities(TensorFaces(torch.rand(2, 3, 8, 8), [0, 1], identities=["a", "b"]), 2)


@pytest.mark.timeout(60)
def test_a_fifo_named_like_an_image_is_an_error_not_a_hang(tmp_path):
    """Issue 20: a FIFO called x.png in an identity folder hung pfd distill forever with no output."""
    import os

    for ident in ("ann", "bob"):  # each its own photos (the same photo under two names is an error)
        (tmp_path / ident).mkdir()
        for k in range(2):
            Image.new("RGB", (16, 16), (k * 40, 10 + 50 * (ident == "bob"), 10)).save(tmp_path / ident / f"{k}.png")
    os.mkfifo(tmp_path / "ann" / "x.png")
    with pytest.raises(PfdError, match=r"ann/x\.png: not a regular file .*FIFO"):
        FaceFolder(tmp_path, size=16)
    faces = FaceFolder(tmp_path, size=16, skip_bad=True)
    assert len(faces) == 4 and "ann/x.png" in faces.skipped
    from pfd.data.images import ImageDecoder, ImageDecodeError

    with pytest.raises(ImageDecodeError, match="not a regular file"):
        ImageDecoder(16)(tmp_path / "ann" / "x.png")


# -- one person under two labels, dangling links (issue 27) -----------------------------------------


@pytest.mark.parametrize("how", ["copy", "hardlink"])
def test_two_identity_folders_with_the_same_photos_are_an_error(tmp_path, how):
    import os
    import shutil

    make_folder(tmp_path / "set", {"alice": 3, "bob": 3})
    twin = tmp_path / "set" / "alice2"
    twin.mkdir()
    for f in (tmp_path / "set" / "alice").iterdir():
        (shutil.copyfile if how == "copy" else os.link)(f, twin / f.name)
    with pytest.raises(PfdError, match=r"alice2: 3 of 'alice2''s 3 photos are also in identity 'alice'.*one person "
                                       r"under two labels"):
        FaceFolder(tmp_path / "set", size=8)


def test_a_few_shared_photos_are_a_warning_naming_them(tmp_path, caplog):
    import shutil

    make_folder(tmp_path / "set", {"alice": 4, "bob": 4})
    one = sorted((tmp_path / "set" / "alice").iterdir())[0]
    shutil.copyfile(one, tmp_path / "set" / "bob" / "stray.png")
    with caplog.at_level(logging.WARNING, logger="pfd.data.faces"):
        faces = FaceFolder(tmp_path / "set", size=8)
    assert len(faces) == 9 and "1 of 'bob''s 5 photos are also in identity 'alice'" in caplog.text


def test_names_equal_after_unicode_normalisation_are_one_identity_twice(tmp_path):
    make_folder(tmp_path / "set", {"Jos\u00e9": 2, "bob": 2})  # NFC
    make_folder(tmp_path / "set", {"Jose\u0301": 2})  # NFD: the same name, other bytes
    with pytest.raises(PfdError, match="the same name as identity .* once Unicode-normalised"):
        FaceFolder(tmp_path / "set", size=8)


def test_an_identity_name_that_is_not_utf8_is_refused_with_a_rename(tmp_path):
    """A Latin-1 folder name from an old archive would crash the first report or page that names it."""
    make_folder(tmp_path / "set", {"bob": 2, "ann": 2})
    os.rename(tmp_path / "set" / "ann", os.path.join(os.fsencode(tmp_path / "set"), b"Jos\xe9"))
    with pytest.raises(PfdError, match=r"Jos\\xe9: the identity folder's name is not valid UTF-8.*rename it \(e.g. to 'José'"):
        FaceFolder(tmp_path / "set", size=8)


def test_a_dangling_symlink_is_named_as_such(tmp_path):
    make_folder(tmp_path / "set", {"alice": 2, "bob": 2})
    (tmp_path / "set" / "alice" / "gone.png").symlink_to(tmp_path / "nowhere.png")
    with pytest.raises(PfdError, match=r"gone.png: a symbolic link to nothing \(it points at .*nowhere.png"):
        FaceFolder(tmp_path / "set", size=8)
