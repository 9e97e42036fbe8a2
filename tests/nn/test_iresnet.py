"""Every IResNet backbone: output contract, state-dict layout of the public checkpoints, sizes; the registry."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pfd.errors import PfdError
from pfd.nn.backbones import create_backbone
from pfd.nn.iresnet import STAGE_BLOCKS, IResNet, stage_channels
from pfd.nn.registry import BACKBONES, list_backbones, register_backbone

#: The IResNet family (MobileFaceNet has its own tests: tests/nn/test_mobilefacenet.py).
ALL = [n for n in list_backbones() if n.startswith(("ir", "adaface_ir"))]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny convolutions are dominated by thread hand-offs: on a shared 2-core box two intra-op
    # threads made an ir100 forward 100x slower (seconds instead of ~30 ms) than one.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
TINY = dict(width=0.125, size=32, embedding_dim=16)


def _depth(name: str) -> int:
    return int(name.rsplit("ir", 1)[1])


def test_registry_has_the_contract_names():
    for name in ["ir18", "ir34", "ir50", "ir100", "adaface_ir18", "adaface_ir50", "adaface_ir100"]:
        assert name in BACKBONES


@pytest.mark.parametrize("name", ALL)
def test_forward_shape_finite_and_arch_rebuilds(name):
    model = create_backbone(name, **TINY).eval()
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        y = model(x)
    assert y.shape == (3, 16) and y.dtype == torch.float32
    assert torch.isfinite(y).all()
    # Raw features: not unit length.
    assert not torch.allclose(y.norm(dim=1), torch.ones(3))
    rebuilt = create_backbone(**model.arch)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}
    rebuilt.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt.eval()(x), y)


@pytest.mark.parametrize("name", ALL)
def test_state_dict_layout(name):
    model = create_backbone(name, **TINY)
    sd = model.state_dict()
    c = stage_channels(TINY["width"])
    n_blocks = sum(STAGE_BLOCKS[_depth(name)])
    fc_in = c[3] * (32 // 16) ** 2
    if name.startswith("adaface_"):
        for key in ["input_layer.0.weight", "input_layer.1.running_var", "input_layer.2.weight",
                    "body.0.res_layer.1.weight", "body.0.res_layer.3.weight", "body.0.res_layer.5.bias",
                    "output_layer.0.weight", "output_layer.4.running_mean"]:
            assert key in sd, key
        assert sd["output_layer.3.weight"].shape == (16, fc_in)
        assert "output_layer.4.weight" not in sd  # BatchNorm1d(affine=False)
        # Stage 1 keeps 64·w channels: max-pool shortcut, no weights. Stage 2 opens with a conv.
        first2 = STAGE_BLOCKS[_depth(name)][0]
        assert not any(k.startswith("body.0.shortcut_layer") for k in sd)
        assert sd[f"body.{first2}.shortcut_layer.0.weight"].shape == (c[1], c[0], 1, 1)
        assert sd[f"body.{n_blocks - 1}.res_layer.4.weight"].shape == (c[3], c[3], 3, 3)
        # stem 7 + 18 per block + 6 per conv shortcut (3 stages) + BN2d 5, Linear 2, BN1d 3
        assert len(sd) == 7 + 18 * n_blocks + 6 * 3 + 10
    else:
        for key in ["conv1.weight", "bn1.running_mean", "prelu.weight", "layer1.0.bn1.weight",
                    "layer1.0.conv1.weight", "layer1.0.bn2.weight", "layer1.0.prelu.weight",
                    "layer1.0.conv2.weight", "layer1.0.bn3.weight", "layer1.0.downsample.0.weight",
                    "layer1.0.downsample.1.running_var", "bn2.weight", "features.weight",
                    "features.bias", "features.running_mean"]:
            assert key in sd, key
        assert sd["fc.weight"].shape == (16, fc_in)
        last = STAGE_BLOCKS[_depth(name)][3] - 1
        assert f"layer4.{last}.conv2.weight" in sd and f"layer4.{last + 1}.conv2.weight" not in sd
        assert not model.features.weight.requires_grad
        assert torch.equal(model.features.weight, torch.ones(16))
        # stem 7 + 18 per block + 6 per downsample (4 stages) + bn2 5, fc 2, features 5
        assert len(sd) == 7 + 18 * n_blocks + 6 * 4 + 12
    # BN-statistic hooks rely on plain BatchNorm modules.
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert bns and all(type(m) in (nn.BatchNorm2d, nn.BatchNorm1d) for m in bns)
    assert all(m.eps == 1e-5 and m.momentum == 0.1 for m in bns)


@pytest.mark.parametrize("name", ALL)
def test_size_not_multiple_of_16_is_rejected(name):
    for size in (40, 8, 0):
        with pytest.raises(PfdError, match="multiple of 16"):
            create_backbone(name, width=0.125, size=size)


@pytest.mark.parametrize("name", ["ir18", "adaface_ir18"])
def test_input_normalisation_and_channel_order(name):
    model = create_backbone(name, **TINY).eval()
    seen = {}
    first = model.conv1 if name == "ir18" else model.input_layer[0]
    first.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        model(x)
    expected = x.flip(1) if name.startswith("adaface") else x  # AdaFace consumes BGR
    assert torch.allclose(seen["x"], (expected - 0.5) / 0.5)


def test_wrong_input_shape_names_the_fix():
    model = create_backbone("ir18", **TINY)
    with pytest.raises(PfdError, match=r"\(B, 3, 32, 32\)"):
        model(torch.rand(1, 3, 64, 64))


def test_other_sizes_change_only_the_fc_input():
    model = create_backbone("ir18", width=0.125, size=48, embedding_dim=8).eval()
    assert model.fc.in_features == 64 * 3 * 3
    assert model(torch.rand(2, 3, 48, 48)).shape == (2, 8)


def test_full_width_matches_published_architecture(monkeypatch):
    # Shapes only: skip the (slow on "meta") weight initialisation and allocate nothing.
    monkeypatch.setattr(IResNet, "reset_parameters", lambda self: None)
    with torch.device("meta"):
        r18 = create_backbone("ir18")
        r50 = create_backbone("ir50")
        r100 = create_backbone("ir100")
    assert r18.conv1.out_channels == 64 and r18.layer4[0].conv2.out_channels == 512
    assert r18.fc.in_features == 512 * 7 * 7 and r18.fc.out_features == 512
    # insightface's model zoo: IResNet-50 43.6 M and IResNet-100 65.2 M parameters.
    assert abs(sum(p.numel() for p in r50.parameters()) - 43.6e6) < 0.05e6
    assert abs(sum(p.numel() for p in r100.parameters()) - 65.2e6) < 0.05e6


def test_width_rounding_and_errors():
    assert stage_channels(1.0) == (64, 128, 256, 512)
    assert stage_channels(0.3) == (19, 38, 77, 154)
    assert stage_channels(0.001) == (1, 1, 1, 1)
    with pytest.raises(PfdError, match="width"):
        create_backbone("ir18", width=0.0)
    with pytest.raises(PfdError, match="ir18"):
        create_backbone("resnet9000")
    with pytest.raises(ValueError, match="already registered"):
        register_backbone("ir18", family="insightface")(lambda **kw: nn.Identity())


@pytest.mark.parametrize("name", ["ir18", "adaface_ir18"])
def test_a_non_square_size_builds_its_own_fc_and_round_trips(name, tmp_path):
    """A judge at a 112 x 96 release's size (issue 26): fc takes C4 · 7 · 6 inputs, not a resize."""
    from pfd.nn.checkpoints import load_backbone, save_checkpoint

    m = create_backbone(name, width=0.125, size=(112, 96), embedding_dim=16).eval()
    assert m.arch["size"] == [112, 96]
    fc = m.fc if name == "ir18" else m.output_layer[3]
    assert fc.in_features == 64 * 7 * 6  # 512 x 0.125 channels x (112/16) x (96/16)
    x = torch.rand(2, 3, 112, 96)
    save_checkpoint(tmp_path / "m.pt", backbone=m)
    again = load_backbone(tmp_path / "m.pt").eval()
    assert torch.equal(again(x), m(x)) and again.arch["size"] == [112, 96]
    assert create_backbone(name, width=0.125, size=(32, 32), embedding_dim=16).arch["size"] == 32  # square stays an int
