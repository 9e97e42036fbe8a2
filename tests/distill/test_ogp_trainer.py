"""OGPTrainer: OGP fine-tuning on the shared training loop (2N head, rotation state, resume)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pfd.config import OGPConfig
from pfd.data.faceset import TensorFaces
from pfd.distill.ogp import OGPStep, Rotation, det_sign, orthogonality_error
from pfd.distill.ogp_trainer import OGPTrainer, ogp_schedule_steps, ogp_train_config
from pfd.nn.checkpoints import load_checkpoint, load_head, save_checkpoint
from pfd.nn.backbones import create_backbone
from pfd.train import MarginStep
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

N, PER, S, D = 4, 6, 32, 16


def _faces() -> TensorFaces:
    g = torch.Generator().manual_seed(1)
    base = torch.rand(N, 3, S, S, generator=g)
    imgs = (base.repeat_interleave(PER, 0) + 0.1 * torch.randn(N * PER, 3, S, S, generator=g)).clamp(0, 1)
    return TensorFaces(imgs, np.repeat(np.arange(N), PER))


@pytest.fixture
def public(tmp_path):
    torch.manual_seed(0)
    return save_checkpoint(tmp_path / "public.pt", backbone=create_backbone("ir18", width=0.125, size=S, embedding_dim=D))


def _ogp(**kw) -> OGPConfig:
    base = dict(head="adaface", scale=16.0, margin=0.3, rep_margin=0.2, lambda_rep=2.0, epochs=3, batch_size=8, lr=0.05,
                rotation_lr=0.2, warmup_epochs=0.5, checkpoint_every=3, init_scale=0.05, seed=2, min_steps=0, step_cap=0)  # fmt: skip
    base.update(kw)
    return OGPConfig(**base)


def _trainer(public, out, *, rotate=True, **kw) -> OGPTrainer:
    return OGPTrainer(_ogp(**kw), faces=_faces(), init=public, out=out / "ogp", final_path=out / "adapted.pt", size=S,
                      rotate=rotate, progress=False)  # fmt: skip


def test_train_config_follows_the_paper_schedule(public, tmp_path):
    cfg = ogp_train_config(_ogp(), init=str(public), out=tmp_path, size=S)
    assert cfg.schedule == "cosine" and cfg.warmup_epochs == 0.5 and cfg.init == str(public)
    assert (cfg.head, cfg.scale, cfg.margin, cfg.lr, cfg.batch_size) == ("adaface", 16.0, 0.3, 0.05, 8)


def test_pfd_fine_tuning_trains_a_2n_head_and_a_rotation_in_so_d(public, tmp_path):
    t = _trainer(public, tmp_path)
    assert isinstance(t.unwrapped, OGPStep) and t.head.weight.shape == (2 * N, D)
    groups = t.optimizer.param_groups
    assert groups[1]["params"] == [t.unwrapped.rotation.generator]  # A alone, own lr, no decay
    assert groups[1]["weight_decay"] == 0.0 and groups[1]["initial_lr"] == 0.2
    M0 = t.rotation_matrix()
    t.fit()
    M = t.rotation_matrix()
    assert not torch.equal(M, M0)  # A was trained
    assert orthogonality_error(M) < 1e-4 and det_sign(M) == 1
    ck = load_checkpoint(tmp_path / "adapted.pt")
    r = Rotation(D)
    r.load_state_dict(ck["extra"]["rotation"])
    torch.testing.assert_close(r().detach(), M)
    assert load_head(tmp_path / "adapted.pt").weight.shape == (2 * N, D)
    last = json.loads((tmp_path / "ogp" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"cls", "rep", "iso", "below_margin", "cos_abs"} <= set(last)


def test_without_rotation_it_is_plain_margin_fine_tuning(public, tmp_path):
    t = _trainer(public, tmp_path, rotate=False)
    assert isinstance(t.unwrapped, MarginStep) and t.head.weight.shape == (N, D)
    t.fit()
    assert torch.equal(t.rotation_matrix(), torch.eye(D)) and t.rotation_generator() is None
    assert load_checkpoint(tmp_path / "adapted.pt")["extra"] is None


def test_resume_restores_the_rotation_and_reproduces_the_run(public, tmp_path):
    a = _trainer(public, tmp_path / "a")
    a.fit()
    run = tmp_path / "b"
    _trainer(public, run).fit()
    (run / "adapted.pt").unlink()
    for p in sorted((run / "ogp" / "checkpoints").glob("step_*.pt"))[1:]:
        p.unlink()
    b = _trainer(public, run)
    assert b.resume() and b.step == 3
    b.fit()
    assert torch.equal(a.rotation_matrix(), b.rotation_matrix())
    for k, v in a.backbone.state_dict().items():
        assert torch.equal(v, b.backbone.state_dict()[k]), k
    assert torch.equal(a.head.weight, b.head.weight)
    # the steps redone after the checkpoint are logged once, as in the uninterrupted run
    steps = [[json.loads(line)["step"] for line in (r / "ogp" / "metrics.jsonl").read_text().splitlines()]
             for r in (tmp_path / "a", run)]
    assert steps[0] == steps[1] and steps[0][-1] == a.step


# -- the schedule: steps with a floor, then extended until eq. 3's margin is met -----------------


def test_schedule_is_counted_in_steps_with_a_floor():
    assert ogp_schedule_steps(_ogp(epochs=3, min_steps=0), steps_per_epoch=4) == 12
    assert ogp_schedule_steps(_ogp(epochs=3, min_steps=200), steps_per_epoch=4) == 200  # small set: the floor
    assert ogp_schedule_steps(_ogp(epochs=3, min_steps=200), steps_per_epoch=100) == 300  # large set: epochs
    assert ogp_schedule_steps(_ogp(epochs=3, min_steps=200, max_steps=7), steps_per_epoch=100) == 7


def test_trainer_applies_the_floor_to_every_method(public, tmp_path):
    for rotate in (True, False):
        t = _trainer(public, tmp_path / str(rotate), rotate=rotate, min_steps=10)
        assert t.steps_per_epoch == 3 and t.total_steps == 10 and t.warmup_steps <= 9


def _share(t: OGPTrainer) -> float:
    """Reference: |cos(M e, e)| < m over the private set, from the written adapted model."""
    from pfd.embed import Embedder
    from pfd.nn.checkpoints import load_backbone

    ck = load_checkpoint(t.final_path)
    r = Rotation(D)
    r.load_state_dict(ck["extra"]["rotation"])
    E = Embedder(load_backbone(t.final_path), device="cpu")(_faces())
    cos = (E @ r().detach().T * E).sum(1)
    return float((cos.abs() < t.ogp.rep_margin).float().mean())


def test_ogp_extends_its_schedule_until_the_margin_target(public, tmp_path):
    # One epoch (3 steps) leaves most embeddings above the margin; the trainer doubles the
    # schedule until 95 % are below it (or the cap, far away here).
    t = _trainer(public, tmp_path, epochs=1, target_below_margin=0.95, step_cap=96)
    t.fit()
    assert t.below_margin >= 0.95 and t.total_steps > 3 and t.step == t.total_steps
    assert t.total_steps in (6, 12, 24, 48, 96)
    assert t.below_margin == pytest.approx(_share(t), abs=1e-6)
    assert load_checkpoint(t.final_path)["step"] == t.step


def test_ogp_stops_at_the_cap_and_warns_when_the_target_is_out_of_reach(public, tmp_path, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="pfd"):
        t = _trainer(public, tmp_path, epochs=1, target_below_margin=1.01, step_cap=12)
        t.fit()
    assert t.total_steps == 12 and t.step == 12  # 3 -> 6 -> 12, then the cap
    assert "below the repulsion margin" in caplog.text
    n = _trainer(public, tmp_path / "none", epochs=1, target_below_margin=0.0, step_cap=96)
    n.fit()
    assert n.total_steps == 3  # target met at once: no extension


def test_a_killed_extension_resumes_with_the_stretched_schedule(public, tmp_path):
    kw = dict(epochs=1, target_below_margin=1.01, step_cap=12)
    a = _trainer(public, tmp_path / "a", **kw)
    a.fit()
    run = tmp_path / "b"
    _trainer(public, run, **kw).fit()
    (run / "adapted.pt").unlink()
    for p in (run / "ogp" / "checkpoints").glob("step_*.pt"):
        if int(p.stem.split("_")[1]) > 9:
            p.unlink()
    b = _trainer(public, run, **kw)
    assert b.total_steps == 3 and b.resume() and b.step == 9 and b.total_steps == 12
    b.fit()
    assert b.step == 12 and torch.equal(a.rotation_matrix(), b.rotation_matrix())
