"""MobileFaceNet: the public weights' layout, loading in every form it ships in, non-square input.

Tiny randomly initialised models in the layout of ``../shared/models/mobilefacenet-casia.ckpt``
(never the file itself: the benchmark-side check ``benchmarks/mobilefacenet_check.py`` loads that).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pfd.errors import PfdError
from pfd.nn.backbones import create_backbone
from pfd.nn.bn_hooks import BNStatistics
from pfd.nn.checkpoints import load_backbone, read_arch, save_checkpoint
from pfd.nn.mobilefacenet import MobileFaceNet
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

TINY = dict(width=0.125, size=(48, 32), embedding_dim=16)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster and bitwise stable


def _published_keys() -> list[str]:
    """The 333 state-dict keys of the public weights, in order, as their model card lists the network."""
    keys: list[str] = []

    def block(prefix: str, prelu: bool = True) -> None:
        keys.append(f"{prefix}.conv.weight")
        keys.extend(f"{prefix}.bn.{s}" for s in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"))
        if prelu:
            keys.append(f"{prefix}.prelu.weight")

    block("conv1")
    block("dw_conv1")
    for i in range(15):
        for j in range(8):
            if j in (0, 3, 6):
                keys.append(f"blocks.{i}.conv.{j}.weight")
            elif j in (1, 4, 7):
                keys.extend(f"blocks.{i}.conv.{j}.{s}" for s in ("weight", "bias", "running_mean", "running_var",
                                                                 "num_batches_tracked"))
            else:
                keys.append(f"blocks.{i}.conv.{j}.weight")
    block("conv2")
    block("linear7", prelu=False)
    block("linear1", prelu=False)
    return keys


def test_full_model_has_the_published_layout_and_size(monkeypatch):
    monkeypatch.setattr(MobileFaceNet, "reset_parameters", lambda self: None)
    with torch.device("meta"):
        model = create_backbone("mobilefacenet")
    sd = model.state_dict()
    assert list(sd) == _published_keys() and len(sd) == 333
    assert model.arch == {"name": "mobilefacenet", "width": 1.0, "size": [112, 96], "embedding_dim": 128, "dropout": 0.0}
    assert sd["linear7.conv.weight"].shape == (512, 1, 7, 6)  # the global depthwise conv covers 7 x 6
    assert sd["blocks.0.conv.0.weight"].shape == (128, 64, 1, 1) and sd["blocks.5.conv.0.weight"].shape == (256, 64, 1, 1)
    assert sd["linear1.conv.weight"].shape == (128, 512, 1, 1)
    assert sum(p.numel() for p in model.parameters()) == 999_552  # ~1 M, as the model card says
    # Residual adds where the stride is 1 and the channels are equal: 4 + 6 + 2 of the 15 blocks.
    assert [b.connect for b in model.blocks] == [False] + [True] * 4 + [False] + [True] * 6 + [False] + [True] * 2
    with torch.device("meta"):
        square = create_backbone("mobilefacenet", size=112)
    assert square.linear7.conv.kernel_size == (7, 7) and square.arch["size"] == 112


def test_forward_shape_normalisation_and_rebuild():
    model = create_backbone("mobilefacenet", **TINY).eval()
    seen = {}
    model.conv1.conv.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    x = torch.rand(3, 3, 48, 32)
    with torch.no_grad():
        y = model(x)
    assert y.shape == (3, 16) and torch.isfinite(y).all()
    assert torch.allclose(seen["x"], (x * 255.0 - 127.5) / 128.0)  # the weights' convention, RGB kept
    assert model.convention == {"channels": "rgb", "height": 48, "width": 32, "mean": 127.5, "std": 128.0}
    rebuilt = create_backbone(**model.arch).eval()
    rebuilt.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(x), y)
    with pytest.raises(PfdError, match=r"\(B, 3, 48, 32\)"):
        model(torch.rand(1, 3, 32, 48))  # width and height swapped: refused, not silently run


@pytest.mark.parametrize("size", [(40, 32), (48, 8), 30, "112x95"])
def test_sizes_that_are_not_multiples_of_16_are_refused(size):
    with pytest.raises(PfdError, match="multiple of 16"):
        create_backbone("mobilefacenet", width=0.125, size=size)


def _random_published(tmp_path, **kw):
    """A tiny random model saved as the public training script saves its weights."""
    model = create_backbone("mobilefacenet", **{**TINY, **kw}).eval()
    for m in model.modules():  # non-trivial running statistics, so that a wrong load would show
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    path = tmp_path / "068.ckpt"
    torch.save({"epoch": 68, "net_state_dict": model.state_dict()}, path)
    return model, path


@pytest.mark.parametrize("wrapped", [True, False])
def test_published_checkpoint_loads_with_its_architecture_inferred(tmp_path, wrapped):
    model, path = _random_published(tmp_path)
    if not wrapped:  # a plain state dict of the same layout
        torch.save(model.state_dict(), path)
    loaded = load_backbone(path)
    assert loaded.arch == {"name": "mobilefacenet", "width": 0.125, "size": [48, 32], "embedding_dim": 16, "dropout": 0.0}
    assert read_arch(path)["size"] == [48, 32]
    x = torch.rand(2, 3, 48, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_width_is_inferred_from_every_channel_count(tmp_path):
    model, path = _random_published(tmp_path, width=0.3, size=(32, 32))
    loaded = load_backbone(path)
    assert loaded.arch["width"] == pytest.approx(0.3, abs=0.01) and loaded.arch["size"] == 32
    assert {k: v.shape for k, v in loaded.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}


def test_pfd_checkpoint_round_trip_keeps_the_non_square_size(tmp_path):
    model, _ = _random_published(tmp_path)
    path = save_checkpoint(tmp_path / "m.pt", backbone=model)
    loaded = load_backbone(path)
    assert loaded.arch["size"] == [48, 32] and loaded.size == (48, 32)
    x = torch.rand(2, 3, 48, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_damaged_published_layout_is_one_line_error(tmp_path):
    model, _ = _random_published(tmp_path)
    sd = {k: v for k, v in model.state_dict().items() if not k.startswith("blocks.14.")}
    torch.save({"epoch": 1, "net_state_dict": sd}, tmp_path / "bad.ckpt")
    with pytest.raises(PfdError, match="14 bottlenecks match no known layout"):
        load_backbone(tmp_path / "bad.ckpt")


def test_bn_statistics_see_every_batchnorm_of_a_non_square_forward():
    model = create_backbone("mobilefacenet", **TINY).eval()
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 2 + 15 * 3 + 3  # stem, 3 per bottleneck, conv2 + GDC + linear1
    x = torch.rand(4, 3, 48, 32, requires_grad=True)
    with BNStatistics(model) as stats:
        assert len(stats) == len(bns)
        model(x)
        loss = stats.loss()
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
