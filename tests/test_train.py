"""Training loop: schedule, deterministic data order, resume equals an uninterrupted run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pfd.config import TrainConfig
from pfd.data.faceset import TensorFaces
from pfd.errors import PfdError
from pfd.nn.checkpoints import load_checkpoint
from pfd.train import global_batches, lr_lambda, train


def _faces(n_ids: int = 6, per: int = 6, size: int = 32) -> TensorFaces:
    g = torch.Generator().manual_seed(1)
    base = torch.rand(n_ids, 3, size, size, generator=g)
    imgs = (base.repeat_interleave(per, 0) + 0.1 * torch.randn(n_ids * per, 3, size, size, generator=g)).clamp(0, 1)
    return TensorFaces(imgs, np.repeat(np.arange(n_ids), per))


def _cfg(out, **kw) -> TrainConfig:
    base = dict(backbone="ir18", width=0.125, size=32, embedding_dim=16, epochs=2, batch_size=12,
                lr=0.05, warmup_epochs=0.5, checkpoint_every=2, out=str(out), seed=3)
    base.update(kw)
    return TrainConfig(**base)


def test_lr_schedule_warmup_then_cosine_and_poly():
    assert lr_lambda(0, total=10, warmup=2) == pytest.approx(0.5)
    assert lr_lambda(1, total=10, warmup=2) == pytest.approx(1.0)
    assert lr_lambda(2, total=10, warmup=2) == pytest.approx(1.0)
    assert lr_lambda(6, total=10, warmup=2) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_lambda(10, total=10, warmup=2) == pytest.approx(0.0, abs=1e-12)
    assert lr_lambda(6, total=10, warmup=2, schedule="poly", power=2) == pytest.approx(0.25)
    with pytest.raises(PfdError, match="schedule"):
        lr_lambda(3, total=10, warmup=0, schedule="step")


def test_global_batches_are_seeded_full_and_disjoint():
    a = global_batches(50, batch_size=8, seed=1, epoch=0)
    assert a.shape == (6, 8) and len(np.unique(a)) == 48
    assert np.array_equal(a, global_batches(50, batch_size=8, seed=1, epoch=0))
    assert not np.array_equal(a, global_batches(50, batch_size=8, seed=1, epoch=1))


def test_training_lowers_the_loss_and_saves_a_loadable_model(tmp_path):
    path = train(_cfg(tmp_path / "run", epochs=4), faces=_faces(), progress=False)
    ck = load_checkpoint(path)
    assert ck["step"] == 4 * (36 // 12)
    assert (tmp_path / "run" / "config.toml").is_file()
    losses = [float(line.split('"loss": ')[1].split(",")[0]) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert losses and all(math.isfinite(v) for v in losses)


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    faces = _faces()
    full = load_checkpoint(train(_cfg(tmp_path / "a"), faces=faces, progress=False))
    # Simulate a crash after step 2: keep only the first checkpoint, drop everything after it.
    run = tmp_path / "b"
    train(_cfg(run), faces=faces, progress=False)
    (run / "model.pt").unlink()
    for p in sorted((run / "checkpoints").glob("step_*.pt"))[1:]:
        p.unlink()
    assert [p.name for p in (run / "checkpoints").glob("*.pt")] == ["step_00000002.pt"]
    resumed = load_checkpoint(train(_cfg(run), faces=faces, progress=False, resume=True))
    assert resumed["step"] == full["step"]
    for k, v in full["backbone"].items():
        assert torch.equal(v, resumed["backbone"][k]), k
    assert torch.equal(full["head"]["state_dict"]["weight"], resumed["head"]["state_dict"]["weight"])


def test_existing_run_is_not_overwritten(tmp_path):
    train(_cfg(tmp_path / "r", epochs=1), faces=_faces(), progress=False)
    with pytest.raises(PfdError, match="--resume"):
        train(_cfg(tmp_path / "r", epochs=1), faces=_faces(), progress=False)


def test_non_finite_loss_stops_with_a_clear_error(tmp_path):
    with pytest.raises(PfdError, match="loss became"):
        train(_cfg(tmp_path / "nan", lr=1e30, grad_clip=0.0, epochs=3), faces=_faces(), progress=False)


def test_too_small_dataset_is_refused(tmp_path):
    with pytest.raises(PfdError, match="fewer than one batch"):
        train(_cfg(tmp_path / "s", batch_size=64), faces=_faces(), progress=False)


def test_flip_masks_do_not_depend_on_the_process_count():
    from types import SimpleNamespace

    from pfd.train import Trainer

    x = torch.rand(8, 3, 4, 4)
    cfg = SimpleNamespace(flip=True, seed=5)

    def augment(rank: int, world: int, batch: torch.Tensor, step: int) -> torch.Tensor:
        fake = SimpleNamespace(cfg=cfg, step=step, acc=SimpleNamespace(process_index=rank, num_processes=world))
        return Trainer._augment(fake, batch)

    flipped = 0
    for step in range(3):
        one = augment(0, 1, x, step)
        two = torch.cat([augment(r, 2, x[4 * r : 4 * r + 4], step) for r in range(2)])
        assert torch.equal(one, two)
        flipped += sum(torch.equal(one[i], x[i].flip(-1)) for i in range(8))
    assert 0 < flipped < 24  # a real random mask, neither all nor nothing
    assert not torch.equal(augment(0, 1, x, 0), augment(0, 1, x, 1))  # a new mask every step


def test_threads_setting_is_applied(tmp_path):
    # No step needs to run (two threads crawl on a loaded 2-core machine): the setting is applied
    # before the run is built, so a run refused for its batch size has already applied it.
    try:
        torch.set_num_threads(2)
        with pytest.raises(PfdError, match="fewer than one batch"):
            train(_cfg(tmp_path / "t", batch_size=64, threads=1), faces=_faces(), progress=False)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        with pytest.raises(PfdError, match="fewer than one batch"):
            train(_cfg(tmp_path / "u", batch_size=64), faces=_faces(), progress=False)
        assert torch.get_num_threads() == 2  # threads = 0 leaves the setting alone
    finally:
        torch.set_num_threads(1)


def test_resume_with_other_settings_is_refused_and_a_finished_run_is_returned(tmp_path):
    faces = _faces()
    run = tmp_path / "r"
    final = train(_cfg(run), faces=faces, progress=False)
    before = final.read_bytes()
    (final.parent / "metrics.jsonl").unlink()
    # Finished: --resume returns the model untouched, without training again.
    assert train(_cfg(run, workers=0, threads=1), faces=faces, progress=False, resume=True) == final
    assert final.read_bytes() == before and not (final.parent / "metrics.jsonl").exists()
    # Interrupted (no model.pt): other batch size, data order or schedule are refused, naming them.
    final.unlink()
    with pytest.raises(PfdError, match=r"step_00000004\.pt: .*batch_size 12 -> 18.*config\.toml"):
        train(_cfg(run, batch_size=18), faces=faces, progress=False, resume=True)
    with pytest.raises(PfdError, match=r"seed 3 -> 4"):
        train(_cfg(run, seed=4), faces=faces, progress=False, resume=True)
    with pytest.raises(PfdError, match=r"epochs 2 -> 3, lr 0.05 -> 0.1"):
        train(_cfg(run, epochs=3, lr=0.1), faces=faces, progress=False, resume=True)
    assert not final.exists()
    # Settings that do not change the numbers may differ.
    resumed = train(_cfg(run, checkpoint_every=5, workers=0), faces=faces, progress=False, resume=True)
    (tmp_path / "before.pt").write_bytes(before)
    assert torch.equal(load_checkpoint(resumed)["head"]["state_dict"]["weight"],
                       load_checkpoint(tmp_path / "before.pt")["head"]["state_dict"]["weight"])


def test_head_can_start_at_the_class_means_of_the_initial_backbone(tmp_path):
    """head_init = class_means (issue 19's downstream protocol): row c = normalised mean embedding of class c."""
    from pfd.embed import Embedder
    from pfd.nn.backbones import create_backbone
    from pfd.nn.checkpoints import save_checkpoint
    from pfd.embed import class_centers
    from pfd.train import Trainer

    torch.manual_seed(0)
    init = save_checkpoint(tmp_path / "init.pt", backbone=create_backbone("ir18", width=0.125, size=32, embedding_dim=16))
    faces = TensorFaces(torch.rand(24, 3, 32, 32, generator=torch.Generator().manual_seed(1)), np.repeat(np.arange(6), 4))
    cfg = TrainConfig(data=["mem"], size=32, init=str(init), head_init="class_means", batch_size=8, epochs=1,
                      out=str(tmp_path / "out"), mixed_precision="no", flip=False)
    trainer = Trainer(cfg, faces=faces, progress=False)
    head = trainer.acc.unwrap_model(trainer.model).head
    from pfd.nn.checkpoints import load_backbone

    emb = Embedder(load_backbone(init), batch_size=8)(faces)
    expect = class_centers(emb, faces.labels, 6)
    torch.testing.assert_close(head.weight.detach(), expect, atol=1e-5, rtol=1e-5)
    means = torch.stack([torch.nn.functional.normalize(emb[faces.labels == c].mean(0), dim=0) for c in range(6)])
    torch.testing.assert_close(expect, means, atol=1e-5, rtol=1e-5)  # against the definition
    from pfd.config import build_config

    with pytest.raises(PfdError, match="head_init"):
        build_config(TrainConfig, {"head_init": "zeros"})
