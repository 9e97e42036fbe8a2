from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from pfd.data.faceset import TensorFaces
from pfd.embed import Embedder
from pfd.errors import PfdError


class TinyNet(nn.Module):
    """Stand-in backbone: conv + BN + dropout + linear, asymmetric so that mirroring matters."""

    def __init__(self, dim: int = 8, size: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * size * size, dim)
        self.arch = {"name": "tiny", "dim": dim, "size": size}

    def forward(self, x):  # (B, 3, S, S) -> (B, D)
        x = (x - 0.5) / 0.5
        return self.fc(self.drop(F.relu(self.bn(self.conv(x)))).flatten(1))


def _model() -> TinyNet:
    torch.manual_seed(1)
    m = TinyNet()
    with torch.no_grad():  # non-trivial running stats so that eval vs train mode differ
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


def _images(n: int = 20, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def _reference(model: nn.Module, x: torch.Tensor, *, flip: bool) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        f = model(x)
        if flip:
            f = f + model(x.flip(3))
    return f / f.norm(dim=1, keepdim=True)


def test_shape_norm_dtype_and_matches_eval_forward():
    m = _model()
    x = _images()
    out = Embedder(m, device="cpu")(x)
    assert out.shape == (20, 8) and out.dtype == torch.float32 and out.device.type == "cpu"
    torch.testing.assert_close(out.norm(dim=1), torch.ones(20))
    torch.testing.assert_close(out, _reference(m, x, flip=False), atol=1e-6, rtol=0)


def test_batching_invariance():
    m, x = _model(), _images(23)
    a = Embedder(m, batch_size=3, device="cpu")(x)
    b = Embedder(m, batch_size=64, device="cpu")(x)
    assert (a - b).abs().max() <= 1e-6


def test_flip_fusion_sums_raw_features_then_normalises():
    m, x = _model(), _images()
    out = Embedder(m, flip=True, device="cpu")(x)
    torch.testing.assert_close(out, _reference(m, x, flip=True), atol=1e-6, rtol=0)
    # and differs from averaging the two normalised embeddings (the other possible order)
    with torch.no_grad():
        m.eval()
        alt = F.normalize(F.normalize(m(x), dim=1) + F.normalize(m(x.flip(3)), dim=1), dim=1)
    assert (out - alt).abs().max() > 1e-4


def test_model_modes_restored_per_submodule():
    m = _model()
    m.train()
    m.bn.eval()  # a deliberately frozen BN inside a training model
    Embedder(m, device="cpu")(_images(4))
    assert m.training and m.conv.training and m.drop.training and not m.bn.training
    m.eval()
    Embedder(m, device="cpu")(_images(4))
    assert not any(mod.training for mod in m.modules())


def test_faceset_input_equals_tensor_input_and_workers():
    m, x = _model(), _images(10)
    faces = TensorFaces(x, np.arange(10) // 2)
    a = Embedder(m, batch_size=4, device="cpu")(x)
    torch.testing.assert_close(Embedder(m, batch_size=4, device="cpu")(faces), a, atol=0, rtol=0)
    torch.testing.assert_close(Embedder(m, batch_size=4, device="cpu")(faces.subset([3, 7], relabel=False)), a[[3, 7]])
    torch.testing.assert_close(Embedder(m, batch_size=4, device="cpu", workers=1)(faces), a, atol=0, rtol=0)


def test_torchscript_and_plain_callable():
    m, x = _model(), _images(6)
    ref = Embedder(m, device="cpu")(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit deprecation notice
        scripted = torch.jit.script(m)
    scripted.train()  # the Embedder must switch the scripted submodules to eval, then back
    torch.testing.assert_close(Embedder(scripted, device="cpu")(x), ref, atol=1e-6, rtol=0)
    assert all(mod.training for mod in scripted.modules())
    m.eval()
    torch.testing.assert_close(Embedder(lambda t: m(t), device="cpu")(x), ref, atol=1e-6, rtol=0)


def test_cache_hit_and_misses(tmp_path):
    m, x = _model(), _images(12)
    emb = Embedder(m, batch_size=5, device="cpu", cache_dir=tmp_path)
    first = emb(x)
    assert emb.last_cache_hit is False and len(list(tmp_path.glob("*.pt"))) == 1
    # a hit must not run the model: poison the forward and expect identical values back
    orig = m.forward
    m.forward = lambda t: torch.full((t.shape[0], 8), float("nan"))
    second = emb(x)
    m.forward = orig
    assert emb.last_cache_hit is True and torch.equal(first, second)
    # one changed pixel -> miss, fresh (different) embedding of that image only
    y = x.clone()
    y[4, 1, 2, 3] = 1 - y[4, 1, 2, 3]
    third = emb(y)
    assert emb.last_cache_hit is False and not torch.equal(third[4], first[4]) and torch.equal(third[:4], first[:4])
    # one changed weight (in place, same object) -> miss
    with torch.no_grad():
        m.fc.weight[0, 0] += 0.1
    fourth = emb(x)
    assert emb.last_cache_hit is False and not torch.equal(fourth, first)
    # flip is part of the key
    Embedder(m, flip=True, device="cpu", cache_dir=tmp_path)(x)
    assert len(list(tmp_path.glob("*.pt"))) == 4


def test_cache_on_faceset_changed_pixel_and_name(tmp_path):
    m, x = _model(), _images(6)
    emb = Embedder(m, device="cpu", cache_dir=tmp_path)
    base = emb(TensorFaces(x.clone(), np.arange(6)))
    assert emb.last_cache_hit is False
    assert torch.equal(emb(TensorFaces(x.clone(), np.arange(6))), base) and emb.last_cache_hit
    y = x.clone()
    y[0, 0, 0, 0] = 1 - y[0, 0, 0, 0]
    emb(TensorFaces(y, np.arange(6)))
    assert emb.last_cache_hit is False
    emb(TensorFaces(x.clone(), np.arange(6), names=[f"n{i}" for i in range(6)]))
    assert emb.last_cache_hit is False


def test_cache_uses_content_digest_when_offered(tmp_path):
    class Digested(TensorFaces):
        def content_digest(self, i):
            self.asked = getattr(self, "asked", 0) + 1
            return f"v1-{i}"

    m, x = _model(), _images(6)
    faces = Digested(x, np.arange(6))
    emb = Embedder(m, device="cpu", cache_dir=tmp_path)
    k = emb.cache_key(faces)
    assert faces.asked == 6
    # subsets follow the parent's digests
    assert emb.cache_key(faces.subset([1, 2], relabel=False)) != emb.cache_key(faces.subset([1, 3], relabel=False))
    faces.content_digest = lambda i: f"v2-{i}"
    assert emb.cache_key(faces) != k


def test_corrupt_cache_file_is_recomputed(tmp_path):
    m, x = _model(), _images(4)
    emb = Embedder(m, device="cpu", cache_dir=tmp_path)
    ref = emb(x)
    (path,) = tmp_path.glob("*.pt")
    path.write_bytes(b"truncated")
    assert torch.equal(emb(x), ref) and emb.last_cache_hit is False
    assert torch.equal(torch.load(path, weights_only=True)["embeddings"], ref)


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.zeros(2, 1, 8, 8), "expected a float tensor"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.uint8), "expected a float tensor"),
        (torch.rand(2, 3, 8, 8) * 2 - 1, r"expected \[0, 1\]"),
        ([1, 2], "FaceSet or an image tensor"),
    ],
)
def test_bad_input(bad, match):
    with pytest.raises(PfdError, match=match):
        Embedder(_model(), device="cpu")(bad)


def test_bad_model_output_and_uncacheable_model(tmp_path):
    x = _images(3)
    with pytest.raises(PfdError, match="NaN"):
        Embedder(lambda t: torch.full((t.shape[0], 4), float("nan")), device="cpu")(x)
    with pytest.raises(PfdError, match="expected"):
        Embedder(lambda t: t.flatten(), device="cpu")(x)
    with pytest.raises(PfdError, match="state_dict"):
        Embedder(lambda t: t.flatten(1), device="cpu", cache_dir=tmp_path)(x)
