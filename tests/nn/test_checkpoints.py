"""Public weight layouts load into fresh models with identical embeddings; pfd's format round-trips."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from pfd.errors import PfdError
from pfd.nn.checkpoints import (
    FORMAT,
    infer_arch,
    load_backbone,
    load_checkpoint,
    load_head,
    save_checkpoint,
)
from pfd.nn.heads import create_head
from pfd.nn.backbones import create_backbone
from pfd.nn.registry import BACKBONES, family_of

SIZE = 32


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny convolutions: one intra-op thread is far faster than two on a shared 2-core box.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _trained(name: str, **kw) -> torch.nn.Module:
    """A small model whose BN statistics and weights are no longer at their initial values."""
    model = create_backbone(name, size=SIZE, **{"width": 0.125, "embedding_dim": 16, **kw})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
        model.train()
        model(torch.rand(4, 3, SIZE, SIZE))  # moves every running mean/var
    return model.eval()


def _embed(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


X = torch.rand(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


# --- public layouts -------------------------------------------------------------------------


def test_insightface_state_dict_loads_with_identical_embeddings(tmp_path):
    src = _trained("ir34")
    path = tmp_path / "model.pt"
    torch.save(src.state_dict(), path)  # exactly what arcface_torch writes
    model = load_backbone(path)
    assert not model.training
    assert model.arch == {**src.arch, "dropout": 0.0}
    assert torch.equal(_embed(model, X), _embed(src, X))


def test_ddp_prefix_and_missing_counters_are_accepted(tmp_path):
    src = _trained("ir18", width=0.3)  # channels 19, 38, 77, 154: width must be inferred from all stages
    sd = {f"module.{k}": v for k, v in src.state_dict().items() if not k.endswith("num_batches_tracked")}
    torch.save(sd, tmp_path / "backbone.pth")
    model = load_backbone(tmp_path / "backbone.pth")
    assert model.layer3[0].conv2.out_channels == 77 and model.fc.in_features == 154 * 4
    assert torch.equal(_embed(model, X), _embed(src, X))


def test_adaface_ckpt_loads_with_identical_embeddings(tmp_path):
    src = _trained("adaface_ir18")
    state = {f"model.{k}": v for k, v in src.state_dict().items()}
    state["head.kernel"] = torch.randn(16, 10)  # AdaFace's head: ignored
    path = tmp_path / "adaface_ir18.ckpt"
    torch.save({"state_dict": state}, path)
    model = load_backbone(path)
    assert model.arch["name"] == "adaface_ir18" and model.arch["size"] == SIZE
    assert torch.equal(_embed(model, X), _embed(src, X))


def test_infer_arch_reads_depth_width_size_and_dim():
    sd = create_backbone("adaface_ir50", width=0.25, size=48, embedding_dim=24).state_dict()
    assert infer_arch(sd) == {"name": "adaface_ir50", "width": 0.25, "size": 48, "embedding_dim": 24, "dropout": 0.0}
    sd = create_backbone("ir100", width=0.0625, size=16, embedding_dim=8).state_dict()
    assert infer_arch(sd)["name"] == "ir100"
    with pytest.raises(PfdError, match="unrecognised backbone layout"):
        infer_arch({"encoder.weight": torch.zeros(1)})


def test_other_architecture_fails_with_key_lists(tmp_path):
    torch.save(_trained("ir34").state_dict(), tmp_path / "ir34.pt")
    with pytest.raises(PfdError, match=r"ir18 .*missing keys \[\].*unexpected keys \[layer1\.2\.") as e:
        load_backbone(tmp_path / "ir34.pt", arch="ir18")
    assert "more)" in str(e.value) and "\n" not in str(e.value)  # long lists are truncated, one line
    assert "arch=" in str(e.value) and "--arch" not in str(e.value)  # no CLI flag of that name exists

    torch.save(_trained("ir18").state_dict(), tmp_path / "ir18.pt")
    with pytest.raises(PfdError) as e:
        load_backbone(tmp_path / "ir18.pt", arch="adaface_ir18")
    msg = str(e.value)
    assert "missing keys [input_layer.0.weight" in msg and "unexpected keys [conv1.weight" in msg

    # Same depth, other width: reported as shape mismatches.
    with pytest.raises(PfdError, match="shape mismatches"):
        load_backbone(tmp_path / "ir18.pt", arch={"width": 0.25})


# --- pfd format ------------------------------------------------------------------------------


def test_pfd_round_trip_is_exact(tmp_path):
    backbone = _trained("ir18")
    head = create_head("adaface", embedding_dim=16, num_classes=5, scale=32.0, t_alpha=0.5)
    head(backbone(X), torch.tensor([0, 1, 4]))  # training mode: AdaFace's EMA buffers move
    # Optimiser/scheduler states as torch writes them (building a real torch.optim optimiser
    # imports torch._dynamo: ~2 s, paid by the training tests instead).
    opt = {
        "state": {0: {"momentum_buffer": torch.randn(8, 3, 3, 3)}, 1: {"momentum_buffer": None}},
        "param_groups": [{"lr": 0.1, "momentum": 0.9, "nesterov": False, "foreach": None, "params": [0, 1]}],
    }
    sched = {"last_epoch": 1, "_last_lr": [0.1], "lr_lambdas": [None]}
    config = {"train": {"lr": 0.1, "data": ["synthetic:public"], "out": tmp_path / "run"}}
    path = save_checkpoint(
        tmp_path / "ck" / "step_7.pt", backbone=backbone, head=head, config=config, step=7,
        optimizer=opt, scheduler=sched, extra={"note": "x", "ids": (1, 2)},
    )
    ck = torch.load(path, weights_only=True)  # the format's promise
    assert ck["format"] == FORMAT and ck["version"] == 1
    ck = load_checkpoint(path)
    assert ck["step"] == 7 and ck["arch"] == backbone.arch
    assert ck["config"] == {"train": {"lr": 0.1, "data": ["synthetic:public"], "out": str(tmp_path / "run")}}
    assert ck["extra"] == {"note": "x", "ids": (1, 2)}
    for k, v in backbone.state_dict().items():
        assert torch.equal(ck["backbone"][k], v), k
    assert torch.equal(ck["optimizer"]["state"][0]["momentum_buffer"], opt["state"][0]["momentum_buffer"])
    assert ck["optimizer"]["param_groups"] == opt["param_groups"] and ck["scheduler"] == sched

    model = load_backbone(path)
    assert model.arch == backbone.arch
    assert torch.equal(_embed(model, X), _embed(backbone, X))
    restored = load_head(path)
    assert restored.spec() == head.spec() and not restored.training
    assert torch.equal(restored.weight, head.weight)
    assert restored.batch_mean.item() == head.batch_mean.item() != 20.0


def test_save_refuses_objects_weights_only_cannot_load(tmp_path):
    backbone = create_backbone("ir18", width=0.125, size=SIZE)
    with pytest.raises(TypeError, match=r"config\['fn'\]"):
        save_checkpoint(tmp_path / "x.pt", backbone=backbone, config={"fn": object()})
    assert not (tmp_path / "x.pt").exists()
    with pytest.raises(ValueError, match="arch"):
        save_checkpoint(tmp_path / "x.pt", backbone=torch.nn.Linear(2, 2))


def test_load_head_and_checkpoint_errors(tmp_path):
    backbone = create_backbone("ir18", width=0.125, size=SIZE)
    save_checkpoint(tmp_path / "nohead.pt", backbone=backbone)
    assert load_checkpoint(tmp_path / "nohead.pt")["head"] is None
    with pytest.raises(PfdError, match="no margin head"):
        load_head(tmp_path / "nohead.pt")
    torch.save(backbone.state_dict(), tmp_path / "plain.pt")
    with pytest.raises(PfdError, match="not a pfd checkpoint"):
        load_checkpoint(tmp_path / "plain.pt")
    with pytest.raises(PfdError, match="no such checkpoint"):
        load_backbone(tmp_path / "missing.pt")
    torch.save({"format": FORMAT, "version": 99, "arch": {}, "backbone": {}}, tmp_path / "future.pt")
    with pytest.raises(PfdError, match="upgrade pfd"):
        load_checkpoint(tmp_path / "future.pt")


# --- damaged and unsafe files --------------------------------------------------------------------


def test_corrupt_files_raise_pfd_error(tmp_path):
    save_checkpoint(tmp_path / "good.pt", backbone=create_backbone("ir18", width=0.125, size=SIZE))
    data = (tmp_path / "good.pt").read_bytes()
    cases = {
        "truncated.pt": data[: len(data) // 2],
        "empty.pt": b"",
        "text.pt": b"hello, not a checkpoint\n",
        "noise.pt": bytes(range(256)) * 4,
    }
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        for loader in (load_checkpoint, load_backbone):
            with pytest.raises(PfdError, match=name) as e:
                loader(tmp_path / name)
            assert "\n" not in str(e.value)
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(PfdError, match="not model weights"):
        load_backbone(tmp_path / "list.pt")


class _Payload:
    """Pickles to a call of os.mkdir: loading it without weights_only would create a folder."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.mkdir, (str(self.target),))


def test_arbitrary_objects_are_refused_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    state = create_backbone("ir18", width=0.125, size=SIZE).state_dict()
    torch.save({**state, "payload": _Payload(marker)}, tmp_path / "zip.pt")
    with pytest.raises(PfdError, match="refused to load.*mkdir"):
        load_backbone(tmp_path / "zip.pt")
    with open(tmp_path / "legacy.pt", "wb") as f:  # bare pickle, not torch's zip format
        pickle.dump({"state_dict": {"payload": _Payload(marker)}}, f)
    with pytest.raises(PfdError, match="legacy.pt"):
        load_backbone(tmp_path / "legacy.pt")
    assert not marker.exists()


def test_torchscript_archive_is_refused_with_how_to_resave(tmp_path):
    import warnings

    model = create_backbone("ir18", width=0.125, size=SIZE).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated in torch 2.14
        torch.jit.trace(model, torch.rand(2, 3, SIZE, SIZE)).save(str(tmp_path / "scripted.pt"))
    for loader in (load_checkpoint, load_backbone):
        with pytest.raises(PfdError, match=r"scripted\.pt: is a TorchScript archive.*state_dict") as e:
            loader(tmp_path / "scripted.pt")
        assert "\n" not in str(e.value)
    # an ordinary checkpoint is not mistaken for one
    save_checkpoint(tmp_path / "plain.pt", backbone=model)
    assert load_backbone(tmp_path / "plain.pt").arch["name"] == "ir18"


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_every_family_recognises_its_own_plain_weights(name, tmp_path):
    """The common test of the backbone registry: every registered model, saved as a plain state dict
    (as its family's public weights are), is recognised by its family and loads bit for bit."""
    family = family_of(name)
    m = create_backbone(name, width=0.125, embedding_dim=16).eval()
    assert m.arch["size"] == family.default_size  # the family's default input size
    torch.save(m.state_dict(), tmp_path / "plain.pt")
    arch = infer_arch(m.state_dict())
    assert {k: arch[k] for k in ("name", "width", "size", "embedding_dim")} == {
        k: m.arch[k] for k in ("name", "width", "size", "embedding_dim")}
    x = torch.rand(2, 3, *((family.default_size,) * 2 if isinstance(family.default_size, int) else family.default_size))
    assert torch.equal(load_backbone(tmp_path / "plain.pt").eval()(x), m(x))
    assert create_backbone(name, width=0.125).arch["embedding_dim"] == family.default_dim
