"""Release writer/reader and the private state dir."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
import torch

from pfd.release.format import encode_png, label_permutation, looks_ordered, MANIFEST, to_uint8
from pfd.release.state_dir import check_separate, prepare_state_dir, read_proxy_map
from pfd.release.writer import write_proxy_map, write_release
from pfd.release.reader import read_release
from pfd.release.lint import png_chunks
from pfd.errors import PfdError
from pfd.io import sha256_file

S = 8


def _proxies(n_cls=5, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n_cls * k, 3, S, S, generator=g)
    cls = np.repeat(np.arange(n_cls), k)
    return x, cls


def test_write_and_read_round_trip(tmp_path):
    x, cls = _proxies()
    w = write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=3)
    m = json.loads((tmp_path / "rel" / MANIFEST).read_text())
    assert m["num_classes"] == 5 and m["num_images"] == 15 and m["image_size"] == S and m["method"] == "pfd"
    assert m["images_per_class"] == {lab: 3 for lab in w.class_label.values()}
    assert set(m["files"]) == set(w.files) and len(set(w.files)) == 15
    for rel, digest in m["files"].items():
        assert sha256_file(tmp_path / "rel" / rel) == digest
    faces = read_release(tmp_path / "rel", verify=True)
    assert len(faces) == 15 and faces.num_classes == 5 and faces.size == S
    q = torch.from_numpy(to_uint8(x)).permute(0, 3, 1, 2).float() / 255
    for i, rel in enumerate(w.files):
        j = faces.names.index(rel)
        img, lab = faces[j]
        assert torch.equal(img, q[i])  # lossless PNG of the quantised proxy
        assert faces.identities[lab] == w.labels[i] == rel.split("/")[0]
    # all proxies of one internal class share one label, different classes differ
    assert len({w.class_label[c] for c in range(5)}) == 5


def test_manifest_has_no_seed_or_names(tmp_path):
    x, cls = _proxies()
    write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=123456)
    text = (tmp_path / "rel" / MANIFEST).read_text()
    assert "123456" not in text and "seed" not in text.lower()
    assert set(json.loads(text)) == {
        "format", "format_version", "method", "image_size", "num_classes", "num_images", "images_per_class", "files"
    }  # fmt: skip


def test_pngs_have_pixels_only():
    img = (np.arange(S * S * 3) % 256).astype(np.uint8).reshape(S, S, 3)
    assert [c for c, _ in png_chunks(encode_png(img))] == [b"IHDR", b"IDAT", b"IEND"]
    assert encode_png(img) == encode_png(img.copy())


def test_labels_are_a_seeded_permutation_not_source_order(tmp_path):
    x, cls = _proxies(n_cls=12, k=1)
    a = write_release(tmp_path / "a", x, cls, method="pfd", label_seed=0)
    b = write_release(tmp_path / "b", x, cls, method="pfd", label_seed=0)
    c = write_release(tmp_path / "c", x, cls, method="pfd", label_seed=1)
    assert a.files == b.files and a.files != c.files
    order = [int(a.class_label[k]) for k in range(12)]
    assert sorted(order) == list(range(12)) and not looks_ordered(order, range(12))


def test_label_permutation_never_looks_ordered():
    for seed in range(50):
        for n in (3, 4, 5, 10):
            perm = label_permutation(n, np.random.default_rng(seed))
            assert sorted(perm) == list(range(n)) and not looks_ordered(perm, np.arange(n))
    assert looks_ordered(np.arange(5), np.arange(5)) and looks_ordered(np.arange(5)[::-1], np.arange(5))


def test_in_class_order_is_shuffled(tmp_path):
    x, cls = _proxies(n_cls=2, k=12)
    w = write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0)
    ks = [int(f.split("/")[1].split(".")[0]) for f in w.files[:12]]  # the first class
    assert sorted(ks) == list(range(12)) and ks != list(range(12))


def test_a_release_of_one_identity_is_an_error(tmp_path):
    x, cls = _proxies(n_cls=1, k=4)
    with pytest.raises(PfdError, match="at least 2 identities"):
        write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0)
    assert not (tmp_path / "rel").exists()


def test_release_is_world_readable_whatever_the_umask(tmp_path):
    x, cls = _proxies()
    old = os.umask(0o077)
    try:
        write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0)
    finally:
        os.umask(old)
    rel = tmp_path / "rel"
    modes = {stat.S_IMODE(p.stat().st_mode) for p in rel.rglob("*") if p.is_file()}
    dirs = {stat.S_IMODE(p.stat().st_mode) for p in [rel, *rel.rglob("*")] if p.is_dir()}
    assert modes == {0o644} and dirs == {0o755}


def test_one_writer_per_release_folder(tmp_path):
    import fcntl

    x, cls = _proxies()
    rel = tmp_path / "rel"
    rel.mkdir()
    fd = os.open(rel, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another writer
    try:
        with pytest.raises(PfdError, match="another process is writing a release"):
            write_release(rel, x, cls, method="pfd", label_seed=0)
    finally:
        os.close(fd)
    write_release(rel, x, cls, method="pfd", label_seed=0)


def test_manifest_names_the_run_and_resume_keeps_to_it(tmp_path):
    x, cls = _proxies()
    w = write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0, run_id="abc")
    assert w.manifest["run_id"] == "abc"
    with pytest.raises(PfdError, match="another run"):
        write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0, run_id="xyz", resume=True)
    write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0, run_id="abc", resume=True)


def test_refuses_foreign_or_existing_release_without_resume(tmp_path):
    x, cls = _proxies()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(PfdError, match="not empty and not a pfd release"):
        write_release(tmp_path / "busy", x, cls, method="pfd", label_seed=0)
    write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0)
    with pytest.raises(PfdError, match="--resume"):
        write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0)
    (tmp_path / "rel" / "stray.bin").write_bytes(b"x")
    with pytest.raises(PfdError, match="stray.bin: not part of the previous pfd release"):
        write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0, resume=True)


def test_resume_rewrites_byte_identical_and_drops_stale_files(tmp_path):
    x, cls = _proxies()
    rel = tmp_path / "rel"
    write_release(rel, x, cls, method="pfd", label_seed=0)
    before = {p.relative_to(rel).as_posix(): p.read_bytes() for p in rel.rglob("*") if p.is_file()}
    (rel / "0000" / ".000.png.abc123.tmp").write_bytes(b"partial")  # a kill mid-write
    write_release(rel, x, cls, method="pfd", label_seed=0, resume=True)
    after = {p.relative_to(rel).as_posix(): p.read_bytes() for p in rel.rglob("*") if p.is_file()}
    assert before == after
    write_release(rel, x[:6], cls[:6], method="pfd", label_seed=0, resume=True)
    assert len([p for p in rel.rglob("*.png")]) == 6


def test_state_dir_mode_and_separation(tmp_path):
    old = os.umask(0o022)
    try:
        sd = prepare_state_dir(tmp_path / "state" / "run1", release=tmp_path / "rel")
    finally:
        os.umask(old)
    assert stat.S_IMODE(sd.stat().st_mode) == 0o700
    with pytest.raises(PfdError, match="state dir lies inside the release"):
        prepare_state_dir(tmp_path / "rel" / "state", release=tmp_path / "rel")
    with pytest.raises(PfdError, match="release lies inside the state dir"):
        check_separate(tmp_path / "state" / "run1" / "rel", tmp_path / "state")
    # through a symlink
    (tmp_path / "rel").mkdir()
    os.symlink(tmp_path / "rel", tmp_path / "alias")
    with pytest.raises(PfdError, match="inside the release"):
        check_separate(tmp_path / "rel", tmp_path / "alias" / "s")
    x, cls = _proxies()
    with pytest.raises(PfdError, match="inside the release"):
        write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0, state_dir=tmp_path / "rel" / "st")


def test_proxy_map_round_trip(tmp_path):
    x, cls = _proxies()
    w = write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=9)
    sd = prepare_state_dir(tmp_path / "state", release=tmp_path / "rel")
    write_proxy_map(sd, w, proxy_source=cls, identities=[f"person{i}" for i in range(5)], label_seed=9)
    doc = read_proxy_map(sd)
    assert doc["label_seed"] == 9 and len(doc["proxies"]) == 15
    assert doc["proxies"][4] == {"index": 4, "file": w.files[4], "label": w.labels[4], "source": 1, "source_name": "person1"}
    with pytest.raises(PfdError, match="no proxy map"):
        read_proxy_map(tmp_path)


def test_verify_catches_altered_file(tmp_path):
    x, cls = _proxies()
    w = write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0)
    (tmp_path / "rel" / w.files[0]).write_bytes(encode_png(np.zeros((S, S, 3), np.uint8)))
    read_release(tmp_path / "rel")  # fine without verification
    with pytest.raises(PfdError, match="sha256 differs"):
        read_release(tmp_path / "rel", verify=True)


def test_uint8_input_and_bad_values():
    u = np.zeros((2, 3, S, S), np.uint8)
    assert to_uint8(u).shape == (2, S, S, 3)
    assert to_uint8(torch.full((1, 3, 2, 2), 0.5)).max() == 128
    with pytest.raises(ValueError, match="NaN"):
        to_uint8(torch.full((1, 3, 2, 2), float("nan")))


def test_labels_never_equal_private_identity_names(tmp_path):
    """Issue 20: identities named 0000..0005 made pfd's own labels equal them; lint failed the release."""
    from pfd.data.faceset import TensorFaces
    from pfd.release.lint import lint_release

    names = [f"{i:04d}" for i in range(6)]
    x = torch.rand(12, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    cls = np.repeat(np.arange(6), 2)
    w = write_release(tmp_path / "rel", x, cls, method="pfd", label_seed=0, avoid_labels=names)
    labels = set(w.class_label.values())
    assert not labels & set(names) and all(len(lab) == 5 and lab.isdigit() for lab in labels)
    private = TensorFaces(torch.rand(12, 3, 8, 8), cls, identities=names)
    assert "source-name" not in {f.kind for f in lint_release(tmp_path / "rel", private=private)}
    plain = write_release(tmp_path / "plain", x, cls, method="pfd", label_seed=0, avoid_labels=["alice"])
    assert set(plain.class_label.values()) == {f"{i:04d}" for i in range(6)}  # no collision: the usual width


def test_a_full_disk_leaves_no_half_written_release(tmp_path, monkeypatch):
    """Issue 20: --out on a nearly full disk gave a traceback and a release without a manifest."""
    import errno

    import pfd.io

    calls = {"n": 0}
    real = pfd.io.os.fsync

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > 3:  # three PNGs fit, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(pfd.io.os, "fsync", fsync)
    x = torch.rand(8, 3, S, S, generator=torch.Generator().manual_seed(0))
    with pytest.raises(PfdError, match="no space left on the device.*run the command again"):
        write_release(tmp_path / "rel", x, np.repeat(np.arange(4), 2), method="pfd", label_seed=0)
    assert list((tmp_path / "rel").rglob("*")) == []  # nothing half-written, no temporary file
    monkeypatch.setattr(pfd.io.os, "fsync", real)
    w = write_release(tmp_path / "rel", x, np.repeat(np.arange(4), 2), method="pfd", label_seed=0)  # space freed
    assert len(w.files) == 8 and (tmp_path / "rel" / "manifest.json").is_file()


@pytest.mark.parametrize("code, message", [("ENOSPC", "no space left on the device"),
                                           ("EFBIG", "file too large for this process's file-size limit (ulimit -f)")])
def test_a_full_disk_under_the_state_dir_is_a_one_line_error(tmp_path, monkeypatch, code, message):
    """Issue 34: EFBIG (``ulimit -f 150``) was a traceback where ENOSPC was one line."""
    import errno

    from click.testing import CliRunner

    import pfd.io
    from pfd.cli import main

    def fsync(fd):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(pfd.io.os, "fsync", fsync)
    res = CliRunner().invoke(main, ["distill", "--private", "synthetic:private,ids=4,imgs=4,size=32", "--size", "32",
                                    "--ipc", "2", "--ogp-batch-size", "8", "--out", str(tmp_path / "rel"),
                                    "--state-dir", str(tmp_path / "st"), "--no-progress"])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "rel").exists()


def test_atomic_writes_are_private_by_default_and_shared_results_are_readable(tmp_path):
    """Issue 27: the benchmark's results files were written 0600 (mkstemp's mode)."""
    import os

    from pfd.io import atomic_write_json

    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "private.json", {"a": 1})
        atomic_write_json(tmp_path / "results.json", {"a": 1}, shared=True)
        (tmp_path / "kept.json").write_text("{}")
        os.chmod(tmp_path / "kept.json", 0o640)
        atomic_write_json(tmp_path / "kept.json", {"a": 2}, shared=True)  # an existing file keeps its mode
    finally:
        os.umask(old)
    mode = lambda name: (tmp_path / name).stat().st_mode & 0o777  # noqa: E731
    assert (mode("private.json"), mode("results.json"), mode("kept.json")) == (0o600, 0o644, 0o640)
