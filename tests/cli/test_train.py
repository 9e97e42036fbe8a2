"""`pfd train` from the command line: defaults, joint data, --init checks, a real SIGKILL then
--resume, data-parallel CPU processes under `accelerate launch`, and end-to-end utility."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib

import pytest
import torch
from click.testing import CliRunner

from tests.conftest import REPO
from pfd.cli import main
from pfd.config import EvalConfig
from pfd.nn.checkpoints import load_backbone, load_checkpoint, save_checkpoint
from pfd.nn.backbones import create_backbone
from pfd.verify import evaluate

ROOT = REPO
DATA = "synthetic:public,ids=12,imgs=6"  # 72 images: 6 steps per epoch at batch 12
TINY = ["--backbone", "ir18", "--width", "0.125", "--size", "32", "--embedding-dim", "16",
        "--batch-size", "12", "--lr", "0.05", "--warmup-epochs", "0.5", "--threads", "1"]


def _train(*args: str):
    return CliRunner().invoke(main, ["train", *args])


def _env() -> dict[str, str]:
    """Environment of a child `python -m pfd`: this checkout on the path, one thread per process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_no_data_pretrains_on_synthetic_public(tmp_path):
    out = tmp_path / "run"
    res = _train(*TINY, "--batch-size", "8", "--max-steps", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    resolved = tomllib.loads((out / "config.toml").read_text())["train"]
    assert resolved["data"] == ["synthetic:public"]
    ck = load_checkpoint(out / "model.pt")
    assert ck["head"]["num_classes"] == 200  # synthetic:public's default identities
    assert ck["step"] == 1 and "steps      1" in res.output and "processes  1" in res.output


def test_joint_training_keeps_label_spaces_disjoint(tmp_path):
    # Two sources whose identity names are equal (the same people's names in another domain):
    # equal names must still become different classes.
    src, other = "synthetic:public,ids=4,imgs=4", "synthetic:public,ids=4,imgs=4,domain=age"
    out = tmp_path / "joint"
    res = _train("--data", src, "--data", other, "--data", "synthetic:test,ids=3,imgs=4", *TINY,
                 "--batch-size", "8", "--max-steps", "2", "--out", str(out))
    assert res.exit_code == 0, res.output
    ck = load_checkpoint(out / "model.pt")
    assert ck["head"]["num_classes"] == 4 + 4 + 3
    assert ck["head"]["state_dict"]["weight"].shape == (11, 16)
    assert tomllib.loads((out / "config.toml").read_text())["train"]["data"] == [src, other, "synthetic:test,ids=3,imgs=4"]
    # The very same source twice would give each of its people two labels: refused (issue 20).
    twice = _train("--data", src, "--data", src, *TINY, "--batch-size", "8", "--max-steps", "2", "--out", str(tmp_path / "t"))
    assert twice.exit_code == 2 and "given twice" in twice.output


def test_init_of_another_size_fails_clearly_and_a_fitting_one_is_used(tmp_path, caplog):
    other = save_checkpoint(tmp_path / "ir34_64px.pt", backbone=create_backbone("ir34", width=0.125, size=64,
                                                                                embedding_dim=16))
    res = _train("--data", DATA, *TINY, "--init", str(other), "--max-steps", "1", "--out", str(tmp_path / "bad"))
    assert res.exit_code == 2
    assert "built for 64px but --size is 32" in res.output and str(other) in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "bad" / "model.pt").exists()

    # A plain insightface-layout state dict of a fitting model: its architecture is used, and at a
    # vanishing learning rate the fine-tuned convolutions stay where --init put them.
    init = create_backbone("ir34", width=0.125, size=32, embedding_dim=16)
    torch.save(init.state_dict(), tmp_path / "ir34_32px.pt")
    out = tmp_path / "ft"
    with caplog.at_level(logging.WARNING, logger="pfd.train"):
        res = _train("--data", DATA, *TINY, "--init", str(tmp_path / "ir34_32px.pt"), "--lr", "1e-12",
                     "--max-steps", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "backbone=ir34" in caplog.text and "backbone=ir18" in caplog.text
    ck = load_checkpoint(out / "model.pt")
    assert ck["arch"]["name"] == "ir34"
    # TINY says --backbone ir18: the resolved config records what was trained, and says so
    assert tomllib.loads((out / "config.toml").read_text())["train"]["backbone"] == "ir34"
    res = _train("--data", DATA, *TINY, "--init", str(tmp_path / "ir34_32px.pt"), "--lr", "1e-12",
                 "--max-steps", "1", "--out", str(out), "--resume")
    assert res.exit_code == 0, res.output  # the same command resumes (here: the finished run)
    assert torch.allclose(ck["backbone"]["layer3.1.conv1.weight"], init.state_dict()["layer3.1.conv1.weight"], atol=1e-9)


def test_init_that_is_not_a_backbone_fails_naming_file_and_keys(tmp_path):
    bad = tmp_path / "not_a_backbone.pt"
    torch.save({"encoder.weight": torch.zeros(3, 3)}, bad)
    res = _train("--data", DATA, *TINY, "--init", str(bad), "--max-steps", "1", "--out", str(tmp_path / "r"))
    assert res.exit_code == 2
    assert str(bad) in res.output and "encoder.weight" in res.output and "Traceback" not in res.output


@pytest.mark.slow
def test_sigkill_then_resume_continues_from_the_last_checkpoint(tmp_path, caplog):
    args = ["--data", DATA, *TINY, "--max-steps", "18", "--checkpoint-every", "3"]
    ref = tmp_path / "ref"
    assert _train(*args, "--out", str(ref)).exit_code == 0

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pfd", "train", *args, "--out", str(run)], cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = run / "checkpoints" / "step_00000003.pt"
    deadline = time.monotonic() + 180
    try:
        while not first.exists():
            assert proc.poll() is None, "training ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            time.sleep(0.002)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "model.pt").exists(), "killed too late: the run had finished"
    kept = sorted(p.name for p in (run / "checkpoints").glob("step_*.pt"))
    last = int(kept[-1][len("step_"):-len(".pt")])
    assert 3 <= last < 18

    again = _train(*args, "--out", str(run))
    assert again.exit_code == 2 and "--resume" in again.output
    with caplog.at_level(logging.INFO, logger="pfd.train"):
        res = _train(*args, "--out", str(run), "--resume")
    assert res.exit_code == 0, res.output
    assert f"at step {last}" in caplog.text and kept[-1] in caplog.text
    a, b = load_checkpoint(ref / "model.pt"), load_checkpoint(run / "model.pt")
    assert a["step"] == b["step"] == 18
    assert _same_weights(a["backbone"], b["backbone"])
    assert torch.equal(a["head"]["state_dict"]["weight"], b["head"]["state_dict"]["weight"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU (gloo) data-parallel path")
def test_accelerate_launch_two_cpu_processes_shard_the_global_batch(tmp_path):
    # `accelerate launch --cpu --num_processes N` starts ONE process (accelerate 1.x); on a
    # CPU-only machine the data-parallel launch is --multi_gpu, i.e. torchrun with gloo.
    args = ["--data", DATA, *TINY, "--max-steps", "4", "--no-flip"]
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), "-m", "pfd", "train", *args, "--out", str(out)]
    res = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "processes  2" in res.stdout and res.stdout.count("model ") == 1  # main process reports once

    single = tmp_path / "one"
    assert _train(*args, "--out", str(single)).exit_code == 0
    two, one = load_checkpoint(out / "model.pt"), load_checkpoint(single / "model.pt")
    assert two["step"] == one["step"] == 4  # same global batch, same number of optimiser steps
    # Sharded: each process normalises its half batch with its own BatchNorm statistics, so the
    # weights differ from the one-process run (two unsharded replicas would reproduce it exactly).
    assert not _same_weights(two["backbone"], one["backbone"])
    model = load_backbone(out / "model.pt")
    assert model.arch["name"] == "ir18"
    with torch.no_grad():
        assert torch.isfinite(model(torch.rand(2, 3, 32, 32))).all()


@pytest.mark.slow
def test_short_training_learns_to_verify_unseen_identities(tmp_path):
    # Calibration (shared 2-core box, 1 thread): ~27 s of training reaches ~0.92 on the
    # identity-disjoint synthetic:test; untrained networks of this shape score 0.65-0.67.
    out = tmp_path / "e2e"
    res = _train("--backbone", "ir18", "--width", "0.125", "--size", "32", "--embedding-dim", "128",
                 "--epochs", "2", "--batch-size", "64", "--lr", "0.1", "--warmup-epochs", "0.5",
                 "--checkpoint-every", "0", "--threads", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    metrics = evaluate(EvalConfig(model=str(out / "model.pt"), data="synthetic:test", num_pairs=1000))
    assert metrics["accuracy"] >= 0.85, metrics
    assert metrics["auc"] >= 0.9, metrics
