"""Release + state dir + private set: cross-checks and the proxy -> private-label mapping."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from pfd.audit.inputs import open_release_state, proxy_sources
from pfd.data.faceset import TensorFaces
from pfd.release.reader import read_release
from pfd.errors import PfdError
from tests.attack_world import make_release
from pfd.release.state_dir import record_digest, write_marker

#: The run id of every release these tests write with a state dir (pfd distill records one on both sides).
RUN_ID = "5eed" * 8

IDS = ["ann", "bob", "cy", "dee"]


@pytest.fixture
def layout(tmp_path):
    g = torch.Generator().manual_seed(0)
    sources = np.repeat(np.arange(4), 2)  # 2 proxies per identity
    make_release(tmp_path / "release", tmp_path / "state", torch.rand(8, 3, 16, 16, generator=g), sources, IDS)
    return tmp_path / "release", tmp_path / "state", sources


def test_sources_follow_names_even_when_the_private_set_is_reordered(layout):
    release, state_dir, sources = layout
    st = open_release_state(release, state_dir)
    assert st.method == "raw" and st.image_size == 16 and len(st.files) == 8
    assert st.public_model is None and st.adapted_model is None and st.private_spec is None
    names = read_release(release).names
    private = TensorFaces(torch.rand(8, 3, 16, 16), np.repeat(np.arange(4), 2), identities=IDS)
    got = proxy_sources(st, names, private)
    # Recover the truth through the proxy map itself: file -> source name.
    rows = {r["file"]: r["source_name"] for r in json.loads((state_dir / "proxy_map.json").read_text())["proxies"]}
    assert [IDS[i] for i in got] == [rows[n] for n in names]
    reordered = TensorFaces(torch.rand(8, 3, 16, 16), np.repeat(np.arange(4), 2), identities=IDS[::-1])
    got2 = proxy_sources(st, names, reordered)
    assert [IDS[::-1][i] for i in got2] == [rows[n] for n in names]


def test_the_state_holds_the_sha256_of_every_file_it_read_and_checks_recorded_ones(layout):
    import hashlib

    release, state_dir, _ = layout
    (state_dir / "adapted.pt").write_bytes(b"weights")  # not recorded by any run: hashed, nothing to compare
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    st = open_release_state(release, state_dir)
    assert st.digests == {"manifest.json": sha(release / "manifest.json"), "proxy_map.json": sha(state_dir / "proxy_map.json"),
                          "adapted.pt": sha(state_dir / "adapted.pt")}
    record_digest(state_dir, "adapted.pt")  # as pfd distill does after OGP: now a replaced file is refused
    (state_dir / "adapted.pt").write_bytes(b"other weights")
    with pytest.raises(PfdError, match="adapted.pt: edited or replaced after the run wrote it"):
        open_release_state(release, state_dir)


def test_private_spec_is_read_from_the_state_config(layout):
    release, state_dir, _ = layout
    (state_dir / "config.toml").write_text('[distill]\nprivate = "synthetic:private,ids=4"\nmethod = "raw"\n')
    assert open_release_state(release, state_dir).private_spec == "synthetic:private,ids=4"
    (state_dir / "config.toml").write_text("[distill\n")
    with pytest.raises(PfdError, match="config.toml: invalid TOML"):
        open_release_state(release, state_dir)


def test_mismatches_are_one_line_errors(layout, tmp_path):
    release, state_dir, _ = layout
    names = read_release(release).names
    # A source identity the private set does not have.
    other = TensorFaces(torch.rand(6, 3, 16, 16), np.repeat(np.arange(3), 2), identities=IDS[:3])
    with pytest.raises(PfdError, match="source identity 'dee' .* is not in synthetic:x") as e:
        proxy_sources(open_release_state(release, state_dir), names, other, private_spec="synthetic:x")
    assert "\n" not in str(e.value)
    # A release without its manifest, a missing state dir, a missing proxy map.
    bare = tmp_path / "bare"
    shutil.copytree(release, bare)
    (bare / "manifest.json").unlink()
    with pytest.raises(PfdError, match="no pfd manifest.json"):
        open_release_state(bare, state_dir)
    with pytest.raises(PfdError, match="no such state dir"):
        open_release_state(release, tmp_path / "nope")
    empty = tmp_path / "empty_state"
    empty.mkdir()
    with pytest.raises(PfdError, match="pfd-state.json: missing or names no run id"):  # issue 54: no pass on a missing id
        open_release_state(release, empty)
    shutil.copy(state_dir / "pfd-state.json", empty / "pfd-state.json")
    with pytest.raises(PfdError, match="no proxy map"):
        open_release_state(release, empty)
    # A state dir of another release: files do not match.
    g = torch.Generator().manual_seed(1)
    make_release(tmp_path / "r2", tmp_path / "s2", torch.rand(12, 3, 16, 16, generator=g), np.repeat(np.arange(4), 3), IDS)
    with pytest.raises(PfdError, match="released file not in .*proxy_map.json"):
        open_release_state(tmp_path / "r2", state_dir)
    with pytest.raises(PfdError, match="not in the release"):
        open_release_state(release, tmp_path / "s2")


def test_maps_without_names_fall_back_to_labels(tmp_path):
    from pfd.release.state_dir import prepare_state_dir
    from pfd.release.writer import write_proxy_map, write_release

    sources = np.array([0, 0, 2, 2, 3, 3])
    prepare_state_dir(tmp_path / "s", release=tmp_path / "r")
    written = write_release(tmp_path / "r", torch.rand(6, 3, 16, 16), sources, method="raw", label_seed=1, run_id=RUN_ID)
    write_marker(tmp_path / "s", RUN_ID)
    write_proxy_map(tmp_path / "s", written, proxy_source=sources, label_seed=1)  # no names
    st = open_release_state(tmp_path / "r", tmp_path / "s")
    names = read_release(tmp_path / "r").names
    private = TensorFaces(torch.rand(8, 3, 16, 16), np.repeat(np.arange(4), 2), identities=IDS)
    by_file = {f: sources[i] for i, f in enumerate(written.files)}
    assert proxy_sources(st, names, private).tolist() == [by_file[n] for n in names]
    small = TensorFaces(torch.rand(4, 3, 16, 16), np.repeat(np.arange(2), 2), identities=IDS[:2])
    with pytest.raises(PfdError, match="source label [23] .* outside the 2 identities"):
        proxy_sources(st, names, small)


def test_a_state_dir_of_another_run_is_refused(layout):
    """Issue 20: attacking a release with another run's state dir printed a meaningless scorecard."""
    release, state_dir, _ = layout
    manifest = json.loads((release / "manifest.json").read_text())
    manifest["run_id"] = "a" * 32
    (release / "manifest.json").write_text(json.dumps(manifest))
    write_marker(state_dir, "a" * 32)
    open_release_state(release, state_dir)  # the same run: fine
    write_marker(state_dir, "b" * 32)
    with pytest.raises(PfdError, match=r"state dir of run bbbbbbbbbbbb, but .* was written by run aaaaaaaaaaaa"):
        open_release_state(release, state_dir)
