"""Attacker models: checkpoints and TorchScript files load into the same embedding interface."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from pfd.attackers.loading import is_torchscript, load_attacker, resize_images
from pfd.errors import PfdError
from pfd.nn.checkpoints import save_checkpoint
from pfd.nn.backbones import create_backbone
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]


@pytest.fixture
def backbone():
    torch.manual_seed(0)
    return create_backbone("ir18", width=0.125, size=32, embedding_dim=16).eval()


def _script(tmp_path, net, name="net.ts", meta=None):
    path = tmp_path / name
    extra = {"pfd.json": json.dumps(meta)} if meta is not None else {}
    torch.jit.save(torch.jit.trace(net, torch.rand(2, 3, 32, 32)), str(path), _extra_files=extra)
    return path


def test_checkpoint_attacker_embeds_like_the_backbone(tmp_path, backbone):
    path = save_checkpoint(tmp_path / "m.pt", backbone=backbone)
    att = load_attacker(path, role="public", device="cpu")
    assert (att.kind, att.size, att.embedding_dim, att.role) == ("checkpoint", 32, 16, "public")
    assert att.has_batchnorm and not is_torchscript(path)
    x = torch.rand(5, 3, 32, 32)
    with torch.no_grad():
        ref = F.normalize(backbone(x), dim=1)
    assert torch.allclose(att.embed(x), ref, atol=1e-5)
    # Images of another size are resized to the model's input first.
    big = F.interpolate(x, size=(64, 64), mode="nearest")
    assert torch.allclose(att.embed(big), att.embed(resize_images(big, 32)), atol=1e-6)


def test_torchscript_size_from_metadata_option_or_attribute(tmp_path, backbone):
    with_meta = _script(tmp_path, backbone, "meta.ts", meta={"size": 32})
    assert is_torchscript(with_meta)
    att = load_attacker(with_meta, device="cpu")
    assert (att.kind, att.size, att.embedding_dim) == ("torchscript", 32, 16)
    x = torch.rand(3, 3, 32, 32)
    ref = load_attacker(save_checkpoint(tmp_path / "m.pt", backbone=backbone), device="cpu").embed(x)
    assert torch.allclose(att.embed(x), ref, atol=1e-5)

    bare = _script(tmp_path, backbone, "bare.ts")
    with pytest.raises(PfdError, match="no declared input size"):
        load_attacker(bare)
    assert load_attacker(bare, size=32).size == 32

    class WithSize(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.size = 32
            self.fc = torch.nn.Linear(3 * 32 * 32, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1))

    path = tmp_path / "attr.ts"
    torch.jit.save(torch.jit.script(WithSize()), str(path))
    assert load_attacker(path).size == 32


def test_wrong_size_and_bad_files_are_one_line_errors(tmp_path, backbone):
    ts = _script(tmp_path, backbone, "net.ts", meta={"size": 32})
    with pytest.raises(PfdError, match="does not accept") as e:
        load_attacker(ts, size=48)
    assert "\n" not in str(e.value) and "net.ts" in str(e.value)
    ck = save_checkpoint(tmp_path / "m.pt", backbone=backbone)
    with pytest.raises(PfdError, match="takes 32px images, not 64px"):
        load_attacker(ck, size=64)
    with pytest.raises(PfdError, match="no such model file"):
        load_attacker(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a model")
    with pytest.raises(PfdError, match="junk.pt"):
        load_attacker(junk)
    att = load_attacker(ck)
    from pfd.data.faceset import TensorFaces

    with pytest.raises(PfdError, match="open it with size=32"):
        att.embed(TensorFaces(torch.rand(2, 3, 16, 16), [0, 1]))


def test_torchscript_model_that_returns_the_wrong_shape(tmp_path):
    class Flat(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean()

    path = tmp_path / "flat.ts"
    torch.jit.save(torch.jit.script(Flat()), str(path), _extra_files={"pfd.json": '{"size": 16}'})
    with pytest.raises(PfdError, match=r"must return \(B, D\) embeddings"):
        load_attacker(path)
