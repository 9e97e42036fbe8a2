"""The release lint: a clean release passes; each planted kind of leak is caught."""

from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from pfd.cli import main
from pfd.data.faceset import TensorFaces
from pfd.data.release import MANIFEST, prepare_state_dir, write_proxy_map, write_release
from pfd.data.release_lint import lint_release, png_chunks
from pfd.errors import PfdError
from pfd.io import sha256_file

S = 8
NAMES = ["alice_smith", "bob_jones", "carol_white", "dave_brown", "erin_black", "frank_green"]


@pytest.fixture
def release(tmp_path):
    """A clean 6-class release, its state dir and the private set it came from."""
    n_cls, k = 6, 2
    x = torch.rand(n_cls * k, 3, S, S, generator=torch.Generator().manual_seed(0))
    cls = np.repeat(np.arange(n_cls), k)
    rel, sd = tmp_path / "release", tmp_path / "state"
    w = write_release(rel, x, cls, method="pfd", label_seed=0, state_dir=sd)
    prepare_state_dir(sd, release=rel)
    write_proxy_map(sd, w, proxy_source=cls, identities=NAMES, label_seed=0)
    private = TensorFaces(
        torch.rand(12, 3, S, S), cls, identities=NAMES, names=[f"{NAMES[c]}/IMG_{i:04d}.jpg" for i, c in enumerate(cls)]
    )
    return rel, sd, private, w


def _kinds(findings):
    return {f.kind for f in findings}


def _restamp(rel, relpath):
    """Update the manifest checksum of a file we changed on purpose (isolates one finding)."""
    m = json.loads((rel / MANIFEST).read_text())
    m["files"][relpath] = sha256_file(rel / relpath)
    (rel / MANIFEST).write_text(json.dumps(m))


def _add_chunk(path, ctype: bytes, payload: bytes):
    data = path.read_bytes()
    chunk = struct.pack(">I", len(payload)) + ctype + payload + struct.pack(">I", zlib.crc32(ctype + payload) & 0xFFFFFFFF)
    ihdr_end = 8 + 12 + 13
    path.write_bytes(data[:ihdr_end] + chunk + data[ihdr_end:])


def test_clean_release_passes(release):
    rel, sd, private, _ = release
    assert lint_release(rel) == []
    assert lint_release(rel, private=private, state_dir=sd) == []


def test_source_names_that_are_release_vocabulary_do_not_fire(release):
    rel, _, _, _ = release
    odd = TensorFaces(torch.rand(2, 3, S, S), [0, 1], identities=["png", "method"], names=["png/a.jpg", "method/b.jpg"])
    assert lint_release(rel, private=odd) == []


def test_state_file_in_release(release):
    rel, *_ = release
    torch.save({"M": torch.eye(2)}, rel / "rotation.pt")
    np.save(rel / "0000" / "prototypes.npy", np.zeros(3))
    f = lint_release(rel)
    assert {x.path for x in f if x.kind == "state-file"} == {"rotation.pt", "0000/prototypes.npy"}


def test_source_identity_in_folder_name(release):
    rel, sd, private, w = release
    old = w.labels[0]
    os.rename(rel / old, rel / "alice_smith")
    assert "source-name" in _kinds(lint_release(rel))  # non-numeric label, even without --private
    hits = [x for x in lint_release(rel, private=private) if "alice_smith" in x.detail]
    assert hits and all(x.kind == "source-name" for x in hits)


def test_source_file_name_in_manifest(release):
    rel, _, private, _ = release
    m = json.loads((rel / MANIFEST).read_text())
    m["extra"] = {"origin": "IMG_0003"}
    (rel / MANIFEST).write_text(json.dumps(m))
    assert lint_release(rel) == []  # no file-like pattern: only the private names reveal it
    f = lint_release(rel, private=private)
    assert any(x.kind == "source-name" and "img_0003" in x.detail for x in f)
    m["extra"] = {"origin": "bob_jones/IMG_0002.jpg"}
    (rel / MANIFEST).write_text(json.dumps(m))
    assert any(x.kind == "source-name" and x.path == "manifest.json:extra.origin" for x in lint_release(rel))


def test_text_chunk(release):
    rel, _, _, w = release
    _add_chunk(rel / w.files[0], b"tEXt", b"Comment\x00alice_smith")
    _restamp(rel, w.files[0])
    f = lint_release(rel)
    assert [(x.kind, x.path) for x in f] == [("png-metadata", w.files[0])] and "tEXt" in f[0].detail


def test_exif_chunk(release):
    rel, _, _, w = release
    _add_chunk(rel / w.files[1], b"eXIf", b"MM\x00*\x00\x00\x00\x08\x00\x00")
    _restamp(rel, w.files[1])
    f = lint_release(rel)
    assert [(x.kind, x.path) for x in f] == [("png-metadata", w.files[1])] and "eXIf" in f[0].detail


def test_trailing_bytes_after_iend(release):
    rel, _, _, w = release
    p = rel / w.files[2]
    p.write_bytes(p.read_bytes() + b"hidden")
    _restamp(rel, w.files[2])
    assert _kinds(lint_release(rel)) == {"png-metadata"}
    assert png_chunks(p.read_bytes())[-1] == (b"<trailing>", 6)


def test_labels_in_source_order(release):
    rel, sd, _, w = release
    # A writer that forgot the permutation: label number = source identity.
    ordered = np.array([int(lab) for lab in w.labels])
    write_proxy_map(sd, w, proxy_source=ordered, label_seed=0)
    assert [x.kind for x in lint_release(rel, state_dir=sd)] == ["label-order"]
    write_proxy_map(sd, w, proxy_source=5 - ordered, label_seed=0)  # reversed is as bad
    assert [x.kind for x in lint_release(rel, state_dir=sd)] == ["label-order"]


def test_state_dir_inside_release(release):
    rel, sd, _, w = release
    with pytest.raises(PfdError, match="inside the release"):
        prepare_state_dir(rel / "state", release=rel)  # the writer side refuses
    inner = rel / "state"
    inner.mkdir(mode=0o700)
    write_proxy_map(inner, w, proxy_source=np.zeros(len(w.files), int), label_seed=0)
    f = lint_release(rel, state_dir=inner)
    assert "state-dir-inside" in _kinds(f)
    assert any(x.kind == "state-file" and x.path == "state/proxy_map.json" for x in f)


def test_state_dir_mode(release):
    rel, sd, *_ = release
    os.chmod(sd, 0o755)
    assert [x.kind for x in lint_release(rel, state_dir=sd)] == ["state-dir-mode"]


def test_checksum_unlisted_and_missing(release):
    rel, _, _, w = release
    p = rel / w.files[0]
    p.write_bytes(p.read_bytes())  # same bytes: still fine
    assert lint_release(rel) == []
    other = rel / w.files[1]
    (rel / w.labels[1] / "999.png").write_bytes(other.read_bytes())
    f = lint_release(rel)
    assert [(x.kind, x.path) for x in f] == [("unlisted-file", f"{w.labels[1]}/999.png")]
    (rel / w.labels[1] / "999.png").unlink()
    from PIL import Image

    Image.fromarray(np.zeros((S, S, 3), np.uint8)).save(p)
    os.remove(other)
    assert sorted(_kinds(lint_release(rel))) == ["checksum", "missing-file"]


def test_cli_exit_codes(release):
    rel, sd, *_ = release
    runner = CliRunner()
    ok = runner.invoke(main, ["release", "lint", str(rel), "--state-dir", str(sd)])
    assert ok.exit_code == 0 and ok.output.startswith("OK:")
    (rel / "config.toml").write_text("seed = 1\n")
    bad = runner.invoke(main, ["release", "lint", str(rel)])
    assert bad.exit_code == 1
    assert "state-file" in bad.output and "config.toml" in bad.output and "FAIL" in bad.output
    missing = runner.invoke(main, ["release", "lint", str(rel / "nope")])
    assert missing.exit_code == 2 and "no such release folder" in missing.output
