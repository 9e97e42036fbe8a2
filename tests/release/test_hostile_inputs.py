"""Hostile inputs around a release and its state dir (issue 54's own cases): each gets a finding or a
one-line error naming the file, never a traceback and never a pass."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from pfd.audit.inputs import open_release_state
from pfd.data.sources import open_faces
from pfd.errors import PfdError
from pfd.io import sha256_file
from pfd.release.format import MANIFEST
from pfd.release.lint import lint_release
from pfd.release.reader import read_release
from pfd.release.state_dir import (MARKER, PROXY_MAP, check_digest, prepare_state_dir, read_proxy_map, record_digest,
                                    write_marker)
from pfd.release.writer import write_proxy_map, write_release

RUN_ID = "beef" * 8
NAMES = [f"person_{i:02d}" for i in range(6)]


@pytest.fixture
def pair(tmp_path):
    x = torch.rand(12, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    cls = np.repeat(np.arange(6), 2)
    rel, sd = tmp_path / "release", tmp_path / "state"
    prepare_state_dir(sd, release=rel)
    write_marker(sd, RUN_ID)
    w = write_release(rel, x, cls, method="pfd", label_seed=0, state_dir=sd, run_id=RUN_ID)
    write_proxy_map(sd, w, proxy_source=cls, identities=NAMES, label_seed=0)
    return rel, sd, w


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_an_empty_manifest_is_a_finding_and_a_one_line_error(pair):
    rel, sd, _ = pair
    (rel / MANIFEST).write_text("")
    assert "manifest" in {f.kind for f in lint_release(rel, state_dir=sd)}
    with pytest.raises(PfdError) as e:
        open_release_state(rel, sd)
    assert "manifest.json" in _one_line(e)


def test_a_truncated_proxy_map_is_one_line_naming_it(pair):
    rel, sd, _ = pair
    (sd / PROXY_MAP).write_text((sd / PROXY_MAP).read_text()[:40])
    with pytest.raises(PfdError, match="proxy_map.json: not valid JSON") as e:
        open_release_state(rel, sd)
    _one_line(e)
    assert "proxy-map" in {f.kind for f in lint_release(rel, state_dir=sd)}


def test_a_proxy_map_listing_one_file_twice_is_damaged(pair):
    rel, sd, _ = pair
    doc = json.loads((sd / PROXY_MAP).read_text())
    doc["proxies"].append(dict(doc["proxies"][0], source=5))
    (sd / PROXY_MAP).write_text(json.dumps(doc))
    record_digest(sd, PROXY_MAP)  # as a tool that rewrote the map and its digest would: the rows themselves are refused
    with pytest.raises(PfdError, match="has two rows; the state dir is damaged"):
        open_release_state(rel, sd)


def test_a_proxy_map_edited_after_the_run_is_refused_by_every_reader(pair):
    rel, sd, _ = pair
    doc = json.loads((sd / PROXY_MAP).read_text())
    a, b = doc["proxies"][0], doc["proxies"][2]
    a["source"], b["source"] = b["source"], a["source"]  # two proxies' sources swapped: still a valid map
    (sd / PROXY_MAP).write_text(json.dumps(doc))
    with pytest.raises(PfdError, match="edited or replaced after the run wrote it") as e:
        open_release_state(rel, sd)
    assert "proxy_map.json" in _one_line(e)
    assert "proxy-map" in {f.kind for f in lint_release(rel, state_dir=sd)}
    with pytest.raises(PfdError, match="edited or replaced after the run wrote it"):
        read_proxy_map(sd)


@pytest.mark.parametrize("model", ["adapted.pt", "judge_model.pt", "public_model.pt"])
def test_a_model_replaced_in_the_state_dir_after_the_run_is_refused(pair, model):
    rel, sd, _ = pair
    (sd / model).write_bytes(b"the checkpoint the run wrote")
    record_digest(sd, model)
    open_release_state(rel, sd)  # as recorded: opens
    (sd / model).write_bytes(b"another run's checkpoint")  # e.g. the public model copied over the adapted one
    with pytest.raises(PfdError, match="edited or replaced after the run wrote it") as e:
        open_release_state(rel, sd)
    assert model in _one_line(e)
    (sd / model).unlink()  # a recorded model that is gone is refused as well (not silently skipped)
    with pytest.raises(PfdError, match="missing after the run wrote it"):
        check_digest(sd, model)


@pytest.mark.parametrize("marker", ['{"format": "pfd-state", "run_id": 7}', "not json", ""])
def test_a_marker_without_a_readable_run_id_is_a_refusal(pair, marker):
    rel, sd, _ = pair
    (sd / MARKER).write_text(marker)
    with pytest.raises(PfdError, match="names no run id"):
        open_release_state(rel, sd)
    assert [f.kind for f in lint_release(rel, state_dir=sd)] == ["other-run"]


def test_a_truncated_png_is_a_finding_and_reading_it_is_one_line(pair):
    rel, sd, w = pair
    p = rel / w.files[3]
    p.write_bytes(p.read_bytes()[:60])
    m = json.loads((rel / MANIFEST).read_text())
    m["files"][w.files[3]] = sha256_file(p)
    (rel / MANIFEST).write_text(json.dumps(m))
    assert "png-corrupt" in {f.kind for f in lint_release(rel, state_dir=sd)}
    faces = read_release(rel)
    with pytest.raises(PfdError) as e:
        for i in range(len(faces)):
            faces.load(i)
    assert w.files[3].split("/")[-1] in _one_line(e)


def test_an_emptied_label_folder_is_a_missing_file_and_a_map_mismatch(pair):
    rel, sd, w = pair
    label = w.files[0].split("/")[0]
    for p in (rel / label).iterdir():
        p.unlink()
    kinds = {f.kind for f in lint_release(rel, state_dir=sd)}
    assert {"missing-file", "proxy-map"} <= kinds, kinds
    with pytest.raises(PfdError, match="not in the release"):
        open_release_state(rel, sd)


def test_a_card_checksum_in_upper_case_hex_is_not_the_schema(pair):
    rel, sd, _ = pair
    (rel / "README.md").write_text("card")
    os.chmod(rel / "README.md", 0o644)
    m = json.loads((rel / MANIFEST).read_text())
    m["card"] = {"file": "README.md", "sha256": sha256_file(rel / "README.md").upper()}
    (rel / MANIFEST).write_text(json.dumps(m))
    assert "manifest" in {f.kind for f in lint_release(rel, state_dir=sd)}


def test_a_private_set_of_mixed_image_sizes_still_finds_a_copied_photo(pair, tmp_path):
    """Private photos of 24, 32 and 64 px in one folder; one of them copied into the release at 16 px."""
    rel, sd, w = pair
    faces = tmp_path / "faces"
    src = open_faces("synthetic:private,ids=3,imgs=4,size=64")
    for i in range(len(src)):
        side = (24, 32, 64)[i % 3]
        px = (src.load(i).permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        d = faces / src.identities[int(src.labels[i])]
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(px).resize((side, side), Image.Resampling.BICUBIC).save(d / f"{i:03d}.png")
    private = open_faces(str(faces))
    original = (private.load(5).permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    planted = np.asarray(Image.fromarray(original).resize((16, 16), Image.Resampling.LANCZOS))
    Image.fromarray(planted).save(rel / w.files[2])
    m = json.loads((rel / MANIFEST).read_text())
    m["files"][w.files[2]] = sha256_file(rel / w.files[2])
    (rel / MANIFEST).write_text(json.dumps(m))
    f = [x for x in lint_release(rel, private=private) if x.kind == "private-image"]
    assert [x.path for x in f] == [w.files[2]] and private.names[5] in f[0].detail


def test_a_read_only_release_and_state_dir_are_read_and_linted(pair):
    """A published copy is often read-only: reading it, and its read-only state dir, needs no write."""
    rel, sd, w = pair
    folders = [rel, *[p for p in rel.iterdir() if p.is_dir()]]
    try:
        for d in folders:
            os.chmod(d, 0o555)
        os.chmod(sd, 0o500)
        assert open_release_state(rel, sd).files == sorted(w.files)
        kinds = [f.kind for f in lint_release(rel, state_dir=sd)]
        assert set(kinds) == {"release-mode"}, kinds  # 0555 is named (a release is 0755), nothing else
    finally:
        for d in folders:
            os.chmod(d, 0o755)
        os.chmod(sd, 0o700)


def test_a_disk_that_fills_while_the_card_is_written_leaves_no_half_release(tmp_path, monkeypatch):
    """ENOSPC after the images, at the dataset card: nothing of the new release stays behind."""
    import errno

    import pfd.release.writer as writer

    real = writer.atomic_write_bytes

    def full(path, data, **kw):
        if str(path).endswith("README.md"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data, **kw)

    monkeypatch.setattr(writer, "atomic_write_bytes", full)
    out = tmp_path / "rel"
    with pytest.raises(OSError):
        write_release(out, torch.rand(4, 3, 8, 8), [0, 0, 1, 1], method="pfd", label_seed=0, run_id=RUN_ID, card="x")
    assert not out.exists() or not any(out.rglob("*"))


def test_very_many_small_identities_are_checked_file_by_file(tmp_path):
    """2,000 identities x 2 proxies: the release <-> state check and lint still name the one stray file."""
    n = 2000
    x = torch.rand(2 * n, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    cls = np.repeat(np.arange(n), 2)
    rel, sd = tmp_path / "release", tmp_path / "state"
    prepare_state_dir(sd, release=rel)
    write_marker(sd, RUN_ID)
    w = write_release(rel, x, cls, method="pfd", label_seed=0, state_dir=sd, run_id=RUN_ID)
    write_proxy_map(sd, w, proxy_source=cls, identities=[f"p{i}" for i in range(n)], label_seed=0)
    assert len(open_release_state(rel, sd).files) == 2 * n
    (rel / w.files[-1]).unlink()
    with pytest.raises(PfdError, match=r"in .*proxy_map.json but not in the release \(1 such\)"):
        open_release_state(rel, sd)


def test_a_private_set_copied_through_macos_is_refused_with_the_unicode_form_named(tmp_path):
    """The state dir recorded 'José' composed (NFC); the same folder copied back from macOS is decomposed (NFD)."""
    from pfd.data.faces import FaceFolder
    from pfd.release.private_set import check_audited_private_set, private_set_record, record_private_set

    root = tmp_path / "private"
    for name in ("Jos\u00e9", "bob"):
        (root / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), 40 * i + len(name), np.uint8)).save(root / name / f"{i}.png")
    record = tmp_path / "private_set.json"
    record_private_set(record, private_set_record(FaceFolder(root, size=8)))
    os.rename(root / "Jos\u00e9", root / "Jose\u0301")
    with pytest.raises(PfdError, match=r"spelt in another Unicode form .*rename the folder back") as e:
        check_audited_private_set(record, FaceFolder(root, size=8), spec=str(root))
    _one_line(e)


def test_a_jpeg_saved_under_a_png_name_is_a_finding(pair):
    """A publishing script that re-encodes the release as JPEG but keeps the names: lossy pixels under a lossless
    name (and JPEG metadata lint does not read) are not the release pfd wrote."""
    rel, sd, w = pair
    p = rel / w.files[1]
    Image.open(p).convert("RGB").save(p, format="JPEG", quality=95)
    m = json.loads((rel / MANIFEST).read_text())
    m["files"][w.files[1]] = sha256_file(p)  # the manifest rewritten to match
    (rel / MANIFEST).write_text(json.dumps(m))
    found = [f for f in lint_release(rel, state_dir=sd) if f.kind == "png-corrupt"]
    assert [f.path for f in found] == [w.files[1]], found


def test_a_damaged_digest_table_in_the_marker_is_a_refusal_not_a_pass(pair):
    rel, sd, _ = pair
    marker = json.loads((sd / MARKER).read_text())
    (sd / MARKER).write_text(json.dumps({**marker, "digests": ["proxy_map.json"]}))
    with pytest.raises(PfdError, match="is not a table of file digests") as e:
        open_release_state(rel, sd)
    _one_line(e)


def test_a_truncated_private_set_record_is_one_line_naming_it(pair, tmp_path):
    from pfd.release.private_set import check_audited_private_set

    (sd_record := tmp_path / "private_set.json").write_text('{"format": "pfd-private-set", "identi')
    faces = open_faces("synthetic:private,ids=3,imgs=2", size=16)
    with pytest.raises(PfdError, match=r"private_set.json: unreadable private-set record .*the state dir is damaged") as e:
        check_audited_private_set(sd_record, faces, spec="synthetic:private")
    _one_line(e)


def test_a_state_dir_reached_through_a_symlink_is_the_same_state_dir(pair, tmp_path):
    """Told apart by content, not by how a path is spelt: a link or a trailing slash changes nothing."""
    rel, sd, w = pair
    (tmp_path / "link").symlink_to(sd, target_is_directory=True)
    a = open_release_state(rel, tmp_path / "link")
    b = open_release_state(str(rel) + "/", str(sd) + "/")
    assert a.sources == b.sources == open_release_state(rel, sd).sources
    assert not [f for f in lint_release(rel, state_dir=tmp_path / "link") if f.kind in ("other-run", "proxy-map")]


def test_release_and_state_dir_given_the_wrong_way_round_is_one_line(pair):
    rel, sd, _ = pair
    with pytest.raises(PfdError) as e:
        open_release_state(sd, rel)
    msg = _one_line(e)
    assert str(sd) in msg and ("manifest" in msg or "release" in msg), msg
