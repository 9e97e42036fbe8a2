"""The public starting model: pretraining cache key, reuse, architecture checks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pfd.distill import public as pub
from pfd.errors import PfdError
from pfd.nn.checkpoints import check_arch
from pfd.nn.backbones import create_backbone
from tests.distill_public import tiny_train_config
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)


def test_cache_key_ignores_output_settings_only(tmp_path):
    cfg = tiny_train_config(tmp_path / "a")
    same = dataclasses.replace(cfg, out=str(tmp_path / "b"), workers=3, checkpoint_every=7)
    assert pub.pretrain_key(cfg) == pub.pretrain_key(same)
    assert pub.pretrain_key(cfg) != pub.pretrain_key(dataclasses.replace(cfg, lr=0.05))
    assert pub.pretrain_key(cfg) != pub.pretrain_key(dataclasses.replace(cfg, size=48))


def test_cache_key_sees_changed_data(tmp_path):
    from pfd.data.faceset import TensorFaces

    cfg = tiny_train_config(tmp_path)
    imgs = torch.rand(6, 3, 32, 32)
    a = TensorFaces(imgs, [0, 0, 1, 1, 2, 2])
    b = TensorFaces(imgs.clone(), [0, 0, 1, 1, 2, 2])
    assert pub.pretrain_key(cfg, a) == pub.pretrain_key(cfg, b) != pub.pretrain_key(cfg)
    b.images[5] += 0.01  # e.g. a changed renderer behind the same spec
    assert pub.pretrain_key(cfg, a) != pub.pretrain_key(cfg, b)


def test_cache_dir_follows_pfd_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PFD_CACHE_DIR", str(tmp_path / "c"))
    assert pub.public_cache_dir() == tmp_path / "c" / "public"
    monkeypatch.delenv("PFD_CACHE_DIR")
    assert str(pub.public_cache_dir()).endswith(".cache/pfd/public")


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_pretrained_model_is_cached_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("PFD_CACHE_DIR", str(tmp_path))
    cfg = tiny_train_config("ignored", data=["synthetic:public,ids=8,imgs=4,size=32"], epochs=1, batch_size=16)
    path = pub.pretrained_public_model(cfg, progress=False)
    assert path.parent.parent == tmp_path / "public" and path.name == "model.pt" and path.is_file()
    before = path.stat().st_mtime_ns

    class Boom:
        def __init__(self, *a, **k):
            raise AssertionError("a cached model must not be retrained")

    monkeypatch.setattr("pfd.train.Trainer", Boom)
    assert pub.pretrained_public_model(cfg, progress=False) == path and path.stat().st_mtime_ns == before


def test_public_checkpoint_architecture_checks():
    model = create_backbone("ir18", width=0.125, size=32, embedding_dim=16)
    check_arch(model, "p.pt", size=32, backbone="ir18")
    check_arch(model, "p.pt", size=32)
    with pytest.raises(PfdError, match=r"p.pt: the public model is ir18 .*32px.* uses 112px.*--size 32"):
        check_arch(model, "p.pt", size=112)
    with pytest.raises(PfdError, match="expects backbone 'ir50'"):
        check_arch(model, "p.pt", size=32, backbone="ir50")
