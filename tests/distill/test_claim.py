"""Claiming a run (pfd.distill.claim): clobber checks, foreign folders, one writer, the marker, settings on resume."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO
from pfd.config import DistillConfig, save_config
from pfd.release.writer import write_release
from pfd.distill.claim import check_same_settings
from pfd.release.state_dir import check_outputs, claim_state_dir, read_marker, StateLock, write_marker
from pfd.release.state_dir import StateDir
from pfd.errors import PfdError

ROOT = REPO


def test_outputs_holding_work_need_resume(tmp_path):
    st = StateDir.at(tmp_path / "state")
    check_outputs(tmp_path / "release", st, resume=False)  # nothing there yet
    st.root.mkdir()
    check_outputs(tmp_path / "release", st, resume=False)  # empty is fine
    write_marker(st.root, "run-a")
    save_config(DistillConfig(), st.config, section="distill")
    check_outputs(tmp_path / "release", st, resume=False)  # a run that died before its first stage: no block
    (st.root / "adapted.pt").write_bytes(b"x")
    with pytest.raises(PfdError, match="state dir already holds.*--resume"):
        check_outputs(tmp_path / "release", st, resume=False)
    check_outputs(tmp_path / "release", st, resume=True)
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "a.png").write_bytes(b"x")
    # Not a pfd release: --resume would be refused too, so it is not suggested (issue 20).
    with pytest.raises(PfdError, match="release: already exists and holds files that are not a pfd release") as e:
        check_outputs(tmp_path / "release", StateDir.at(tmp_path / "other"), resume=False)
    assert "--resume" not in str(e.value)
    (tmp_path / "release" / "a.png").unlink()
    write_release(tmp_path / "release", torch.rand(4, 3, 8, 8), [0, 0, 1, 1], method="pfd", label_seed=0, run_id="f" * 32)
    with pytest.raises(PfdError, match="release of another pfd run .* pass its --state-dir with --resume"):
        check_outputs(tmp_path / "release", StateDir.at(tmp_path / "other"), resume=False)


def _tree(root):
    return {p.relative_to(root).as_posix(): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(root.rglob("*")) if p.is_file()} | {".": stat.S_IMODE(root.stat().st_mode)}


def test_foreign_folders_are_refused_untouched_with_or_without_resume(tmp_path):
    user = tmp_path / "mine"
    user.mkdir(mode=0o755)
    os.chmod(user, 0o755)
    (user / "summary.json").write_text('{"mine": 1}')
    (user / "proxy_map.json").write_text("{}")
    before = _tree(user)
    for resume in (False, True):
        with pytest.raises(PfdError, match="pfd-state.json" if resume else "did not write"):
            claim_state_dir(StateDir.at(user), tmp_path / "release", resume=resume)
        assert _tree(user) == before and not (user / ".pfd-lock").exists()
    # --resume of a fresh (new or empty) state dir: nothing to continue.
    with pytest.raises(PfdError, match="no pfd run to resume"):
        claim_state_dir(StateDir.at(tmp_path / "fresh"), tmp_path / "release", resume=True)
    assert not (tmp_path / "fresh").exists()


def test_resume_refuses_a_release_of_another_run(tmp_path):
    st = StateDir.at(tmp_path / "state")
    st.root.mkdir()
    write_marker(st.root, "run-a")
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    rel = tmp_path / "release"
    write_release(rel, x, [0, 0, 1, 1], method="pfd", label_seed=0, run_id="run-b")
    before = _tree(rel)
    with pytest.raises(PfdError, match="another run"):
        claim_state_dir(st, rel, resume=True)
    assert _tree(rel) == before
    claim = claim_state_dir(st, tmp_path / "release2", resume=True)  # no release yet: fine
    assert claim.run_id == "run-a"
    claim.close()
    write_release(tmp_path / "release3", x, [0, 0, 1, 1], method="pfd", label_seed=0, run_id="run-a")
    claim = claim_state_dir(st, tmp_path / "release3", resume=True)  # this run's own release
    claim.close()


def test_one_writer_per_state_dir_and_the_pid_is_named(tmp_path):
    st = StateDir.at(tmp_path / "state")
    first = claim_state_dir(st, tmp_path / "release", resume=False)
    first.begin()
    assert read_marker(st.root)["run_id"] == first.run_id
    with pytest.raises(PfdError, match=rf"another pfd distill \(pid {os.getpid()}\)"):
        claim_state_dir(st, tmp_path / "release", resume=False)
    # A second *process* is refused too (flock is per open file, so this holds across processes).
    code = (
        "import sys; from pathlib import Path; from pfd.release.state_dir import StateLock; from pfd.errors import PfdError\n"
        "try:\n    StateLock(Path(sys.argv[1]))\nexcept PfdError as e:\n    print(e); sys.exit(3)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(st.root)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 3 and f"pid {os.getpid()}" in res.stdout, res.stdout + res.stderr
    first.close()
    claim_state_dir(st, tmp_path / "release", resume=True).close()  # released: the next run may go


def test_the_lock_dies_with_its_process(tmp_path):
    """kill -9 leaves no stale lock: the kernel drops a flock with its holder."""
    root = tmp_path / "state"
    code = "import sys, time; from pathlib import Path; from pfd.release.state_dir import StateLock\n" \
           "l = StateLock(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "locked"
    with pytest.raises(PfdError, match=f"pid {proc.pid}"):
        StateLock(root)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    StateLock(root).release()


def test_state_tree_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        st = StateDir.at(tmp_path / "state")
        claim = claim_state_dir(st, tmp_path / "release", resume=False)
        claim.begin()
        (st.root / "ogp").mkdir()
        (st.root / "ogp" / "metrics.jsonl").write_text("{}")
        claim.close()
    finally:
        os.umask(old)
    modes = {p.relative_to(st.root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in st.root.rglob("*")}
    assert stat.S_IMODE(st.root.stat().st_mode) == 0o700
    # A resumed run tightens what a killed one left behind, before it does anything else.
    os.chmod(st.root / "ogp" / "metrics.jsonl", 0o644)
    again = claim_state_dir(st, tmp_path / "release", resume=True)
    again.begin()
    assert stat.S_IMODE((st.root / "ogp" / "metrics.jsonl").stat().st_mode) == 0o600
    again.close()
    assert modes == {"ogp": 0o700, "ogp/metrics.jsonl": 0o600, "pfd-state.json": 0o600, ".pfd-lock": 0o600}


def test_resume_needs_the_same_settings_except_paths(tmp_path):
    st = StateDir.at(tmp_path)
    cfg = DistillConfig()
    save_config(cfg, st.config, section="distill")
    check_same_settings(st, DistillConfig(out="elsewhere", state_dir="moved", resume=True, workers=4))
    other = DistillConfig()
    other.rta.iterations = 7
    other.ogp.rep_margin = 0.3
    with pytest.raises(PfdError, match=r"ogp.rep_margin: 0.2 -> 0.3; rta.iterations: 1000 -> 7"):
        check_same_settings(st, other)


def test_resume_accepts_the_same_public_model_under_another_spelling(tmp_path, monkeypatch):
    """Issue 20: --resume --public /abs/pubrun/model.pt refused a run started with --public pubrun/model.pt."""
    (tmp_path / "pubrun").mkdir()
    (tmp_path / "pubrun" / "model.pt").write_bytes(b"weights")
    (tmp_path / "other.pt").write_bytes(b"weights")  # same bytes, another file: another setting
    monkeypatch.chdir(tmp_path)
    st = StateDir.at(tmp_path / "state")
    save_config(DistillConfig(public="pubrun/model.pt"), st.config, section="distill")
    for same in (str(tmp_path / "pubrun" / "model.pt"), "./pubrun/../pubrun/model.pt"):
        check_same_settings(st, DistillConfig(public=same, resume=True))
    os.symlink(tmp_path / "pubrun" / "model.pt", tmp_path / "link.pt")
    check_same_settings(st, DistillConfig(public="link.pt", resume=True))
    with pytest.raises(PfdError, match="public: 'pubrun/model.pt' -> 'other.pt'"):
        check_same_settings(st, DistillConfig(public="other.pt", resume=True))


# -- the same rules through pfd distill (they fail in Distillation's constructor, before any stage) --


def test_distill_refuses_a_second_writer_and_foreign_folders(tmp_path):
    from pfd.distill.pipeline import distill
    from tests.distill_public import tiny_distill_config

    from pfd.nn.backbones import create_backbone
    from pfd.nn.checkpoints import save_checkpoint

    # A readable public checkpoint (the run checks it before taking the lock; it never trains here).
    save_checkpoint(tmp_path / "no-public.pt", backbone=create_backbone("ir18", width=0.125, size=32, embedding_dim=32))
    cfg = tiny_distill_config(tmp_path / "no-public.pt", tmp_path)
    holder = StateLock(tmp_path / "state")  # another run, started at the same time
    with pytest.raises(PfdError, match=rf"another pfd distill \(pid {os.getpid()}\)"):
        distill(cfg, progress=False)
    holder.release()
    assert not (tmp_path / "release").exists() and not (tmp_path / "state" / "pfd-state.json").exists()
    user = tmp_path / "user"
    user.mkdir()
    (user / "summary.json").write_text("mine")
    before = _tree(user)
    resume = tiny_distill_config(tmp_path / "no-public.pt", tmp_path, state_dir=str(user), resume=True)
    with pytest.raises(PfdError, match="not a pfd state dir"):
        distill(resume, progress=False)
    assert _tree(user) == before


def test_claim_run_checks_folders_before_inputs_and_inputs_before_the_lock(tmp_path):
    from pfd.distill.claim import claim_run

    seen = []
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "x.png").write_bytes(b"x")  # earlier work in --out: refused first
    cfg = DistillConfig(out=str(tmp_path / "release"), state_dir=str(tmp_path / "state"))
    with pytest.raises(PfdError, match="holds files that are not a pfd release"):
        claim_run(cfg, main=True, check_inputs=lambda: seen.append("inputs"))
    assert seen == [] and not (tmp_path / "state").exists()

    def bad_inputs():
        raise PfdError("bad private set")

    cfg = DistillConfig(out=str(tmp_path / "new"), state_dir=str(tmp_path / "state"))
    with pytest.raises(PfdError, match="bad private set"):
        claim_run(cfg, main=True, check_inputs=bad_inputs)
    assert not (tmp_path / "state").exists()  # no lock file, no marker: nothing written
    claim = claim_run(cfg, main=True, check_inputs=lambda: seen.append("inputs"))
    try:
        assert seen == ["inputs"] and claim.run_id and claim.lock is not None and claim.lock.held
        with pytest.raises(PfdError, match="another pfd distill"):
            claim_run(cfg, main=True)
    finally:
        claim.close()
    cache_inside = DistillConfig(out=str(tmp_path / "new"), state_dir=str(tmp_path / "s2"), embed_cache=str(tmp_path / "new" / "cache"))
    with pytest.raises(PfdError, match="--embed-cache"):
        claim_run(cache_inside, main=True)


def test_a_run_mid_write_is_named_not_taken_for_foreign_files(tmp_path):
    """The second of two runs started together may look while the first writes its marker
    (an atomic write's temporary file is in the folder): it must name the run, not call the
    folder foreign. Without a holder the same folder is foreign."""
    state = StateDir.at(tmp_path / "state")
    holder = StateLock(state.root)
    (state.root / ".pfd-state.json.abc123.tmp").write_text("{")
    with pytest.raises(PfdError, match=rf"another pfd distill \(pid {os.getpid()}\)"):
        claim_state_dir(state, tmp_path / "release", resume=False)
    assert StateLock.holder(state.root / ".pfd-lock") == str(os.getpid())
    holder.release()
    assert StateLock.holder(state.root / ".pfd-lock") is None and StateLock.holder(tmp_path / "missing") is None
    with pytest.raises(PfdError, match="did not write"):
        claim_state_dir(state, tmp_path / "release", resume=False)


def test_a_read_only_out_is_refused_before_any_work(tmp_path, monkeypatch):
    """Issue 27: a read-only --out was found only after the whole pipeline ran (52 s). The suite runs
    as root, for whom every folder is writable, so the permission answer is simulated."""
    import os

    import pfd.distill.claim as claim
    import pfd.io as pfd_io
    from pfd.config import DistillConfig
    from pfd.errors import PfdError

    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(pfd_io.os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    for out, state, option in ((locked / "release", tmp_path / "st", "--out"), (tmp_path / "rel", locked, "--state-dir")):
        cfg = DistillConfig(private="synthetic:private,ids=3,imgs=4,size=16", out=str(out), state_dir=str(state), size=16)
        with pytest.raises(PfdError, match=f"not writable by this user; choose an {option}"):
            claim.claim_run(cfg, main=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked"]  # nothing made


def test_a_state_dir_held_by_a_running_run_is_refused_before_the_callers_costly_checks(tmp_path):
    """Issue 34 (own case): a --resume started while the first run was in RTA spent minutes on its
    input checks (the start pool's aligned search) before the lock refused or admitted it."""
    state = StateDir.at(tmp_path / "state")
    state.root.mkdir()
    write_marker(state.root, "run-1")
    holder = StateLock(state.root)
    called = []
    with pytest.raises(PfdError, match=rf"\(pid {os.getpid()}\)"):
        claim_state_dir(state, tmp_path / "release", resume=True, main=True, check=lambda: called.append(1))
    assert called == []
    holder.release()
    claim = claim_state_dir(state, tmp_path / "release", resume=True, main=True, check=lambda: called.append(1))
    assert called == [1] and claim.run_id == "run-1"
    claim.close()
