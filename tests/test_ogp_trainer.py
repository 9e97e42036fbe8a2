"""OGPTrainer: OGP fine-tuning on the shared training loop (2N head, rotation state, resume)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pfd.config import OGPConfig
from pfd.data.faceset import TensorFaces
from pfd.distill.ogp import OGPStep, Rotation, det_sign, orthogonality_error
from pfd.distill.ogp_trainer import OGPTrainer, ogp_train_config
from pfd.nn.checkpoints import load_checkpoint, load_head, save_checkpoint
from pfd.nn.iresnet import create_backbone
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
                rotation_lr=0.2, warmup_epochs=0.5, checkpoint_every=3, init_scale=0.05, seed=2)  # fmt: skip
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
