"""The state dir contract (pfd.release.state_dir): layout names, batch files, interrupted releases."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from tests.conftest import REPO
from pfd.distill.batches import load_batch, save_batch
from pfd.release.state_dir import StateDir
from pfd.release.writer import clear_interrupted_release
from pfd.errors import PfdError

ROOT = REPO


def test_layout_names_are_the_contract(tmp_path):
    st = StateDir.at(tmp_path / "state")
    names = [st.config, st.public_model, st.adapted, st.rotation, st.prototypes, st.proxy_map, st.summary, st.audit,
             st.batch(7)]
    assert [p.relative_to(st.root).as_posix() for p in names] == [
        "config.toml", "public_model.pt", "adapted.pt", "rotation.pt", "prototypes.pt", "proxy_map.json",
        "summary.json", "audit.json", "batches/batch_00007.pt",
    ]  # fmt: skip
    assert st.ogp.name == "ogp"


def test_batch_round_trip_and_damage(tmp_path):
    st = StateDir.at(tmp_path)
    q = np.random.default_rng(0).integers(0, 256, (3, 3, 8, 8), dtype=np.uint8)
    save_batch(st, 2, rows=np.array([4, 5, 6]), proxies=q, embeddings=torch.eye(3), history={"rta_last": 0.5})
    doc = load_batch(st, 2)
    assert doc["rows"].tolist() == [4, 5, 6] and np.array_equal(doc["proxies"].numpy(), q)
    assert doc["history"] == {"rta_last": 0.5} and st.finished() == {2}
    st.batch(3).write_bytes(b"truncated")
    with pytest.raises(PfdError, match="batch_00003.pt: unreadable.*--resume"):
        load_batch(st, 3)


def test_interrupted_release_is_cleared_only_in_its_own_layout(tmp_path):
    out = tmp_path / "release"
    (out / "0003").mkdir(parents=True)
    (out / "0003" / "000.png").write_bytes(b"x")
    (out / "0003" / ".001.png.abc.tmp").write_bytes(b"x")
    clear_interrupted_release(out)
    assert list(out.iterdir()) == []
    (out / "0001").mkdir()
    (out / "0001" / "000.png").write_bytes(b"x")
    (out / "notes.txt").write_text("mine")
    clear_interrupted_release(out)  # a foreign file: leave everything alone
    assert (out / "notes.txt").exists() and (out / "0001" / "000.png").exists()


def test_the_run_a_state_dir_records_is_read_from_its_distill_table(tmp_path):
    from pfd.release.state_dir import read_run_config, recorded_private_spec, run_setting

    assert read_run_config(tmp_path) == {} and recorded_private_spec(tmp_path) is None  # no config: nothing recorded
    (tmp_path / "config.toml").write_text('[distill]\nprivate = "synthetic:private,ids=4"\nsize = [32, 28]\n'
                                          '[distill.ogp]\nprivate = "not this one"\n')
    config = read_run_config(tmp_path)
    assert run_setting(config, "private") == recorded_private_spec(tmp_path) == "synthetic:private,ids=4"
    assert run_setting(config, "size") == [32, 28] and run_setting(config, "ogp") is None  # a table is no setting
    assert run_setting({"private": "top"}, "private") == "top"  # a config without a [distill] table
    (tmp_path / "config.toml").write_text("[distill\n")
    with pytest.raises(PfdError, match="invalid TOML.*the state dir is damaged"):
        recorded_private_spec(tmp_path)
