"""Outside attacker models: ONNX, TorchScript, module:callable and TOML specs, with input conventions."""

from __future__ import annotations

import copy
import json
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from pfd.attacks.linkability.matching import rank1_reid, streamed_top1, visual_matching
from pfd.attackers.loading import load_attacker, load_outside_attacker
from pfd.attackers.outside import AttackerSpec, ConventionAdapter, InputConvention, read_attacker_spec
from pfd.cli import main
from pfd.errors import PfdError
from pfd.nn.backbones import create_backbone
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SIZE = 32


def _core(net):
    """The backbone without its own (x − 0.5)/0.5: what insightface exports (input already normalised)."""
    core = copy.deepcopy(net).eval()
    core._prepare = lambda x: x  # instance attribute: traced away, like an exported graph
    return core


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny IResNet, and its normalisation-free core exported to ONNX and TorchScript in the test."""
    torch.manual_seed(0)
    net = create_backbone("ir18", width=0.125, size=SIZE, embedding_dim=16).eval()
    core = _core(net)
    root = tmp_path_factory.mktemp("attackers")
    example = torch.rand(2, 3, SIZE, SIZE) * 2 - 1
    onnx_path = root / "tiny.onnx"
    torch.onnx.export(core, (example,), str(onnx_path), input_names=["input"], output_names=["embedding"],
                      dynamic_axes={"input": {0: "batch"}, "embedding": {0: "batch"}}, dynamo=False)
    ts_path = root / "tiny.ts"
    with torch.no_grad():
        traced = torch.jit.trace(core, example)
    torch.jit.save(traced, str(ts_path), _extra_files={"pfd.json": json.dumps({"size": SIZE})})
    return net, onnx_path, ts_path


def _eager(net, x):
    with torch.no_grad():
        return F.normalize(net(x), dim=1)  # the pfd backbone takes [0, 1] and normalises itself


@pytest.mark.parametrize("which", ["onnx", "torchscript"])
def test_exported_models_embed_like_the_eager_model(exported, which):
    net, onnx_path, ts_path = exported
    att = load_outside_attacker(onnx_path if which == "onnx" else ts_path, device="cpu")
    assert (att.kind, att.size, att.embedding_dim, att.distance) == (which, SIZE, 16, "cosine")
    assert att.role == "tiny" and att.convention.mean == (127.5,) * 3  # insightface's default
    x = torch.rand(7, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    got = att.embed(x)
    assert (got - _eager(net, x)).abs().max().item() <= 1e-4
    # The same loader serves `pfd attack mia --model` / `dataset --model`.
    again = load_attacker(onnx_path if which == "onnx" else ts_path, device="cpu") if which == "onnx" else None
    if again is not None:
        assert (again.embed(x) - got).abs().max().item() == 0.0


def test_wrong_convention_changes_the_embeddings_and_sizes_are_checked(exported):
    net, onnx_path, _ = exported
    x = torch.rand(4, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    wrong = load_outside_attacker(onnx_path, convention=InputConvention(mean=0.0, std=255.0), device="cpu")
    assert (wrong.embed(x) - _eager(net, x)).abs().max().item() > 1e-2  # [0, 1] input is not what it expects
    with pytest.raises(PfdError, match="takes 32x32 images, not 48x48"):
        load_outside_attacker(onnx_path, size=48)


def test_python_entry_point_and_function_conventions(tmp_path, monkeypatch):
    (tmp_path / "my_attacker.py").write_text(textwrap.dedent("""
        import torch

        def make():
            # images -> per-channel means: shows exactly what the model was fed
            return lambda x: x.mean(dim=(2, 3))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_attacker", None)
    x = torch.zeros(2, 3, SIZE, SIZE)
    x[:, 0] = 1.0  # pure red
    att = load_outside_attacker("my_attacker:make", convention=InputConvention(size=SIZE, distance="euclidean"))
    assert att.kind == "python" and att.role == "make" and att.distance == "euclidean"
    raw = att.embed(x)  # Euclidean: raw features, not normalised
    torch.testing.assert_close(raw, torch.tensor([[1.0, -1.0, -1.0]] * 2))
    bgr = load_outside_attacker(AttackerSpec(model=lambda t: t.mean(dim=(2, 3)), name="fn",
                                             convention=InputConvention(size=16, mean=(0, 0, 0), std=(255, 255, 255),
                                                                        channels="bgr", distance="euclidean")))
    assert bgr.role == "fn"
    torch.testing.assert_close(bgr.embed(x), torch.tensor([[0.0, 0.0, 1.0]] * 2))  # red moved last
    with pytest.raises(PfdError, match="cannot import"):
        load_outside_attacker("no_such_module_xyz:make")


def test_pad_letterboxes_and_stretch_fills():
    x = torch.ones(1, 3, 32, 32)
    pad = ConventionAdapter(torch.nn.Identity(), InputConvention(size=(16, 32), resize="pad").checked("t"))
    stretch = ConventionAdapter(torch.nn.Identity(), InputConvention(size=(16, 32)).checked("t"))
    p, s = pad.resize(x), stretch.resize(x)
    assert p.shape == s.shape == (1, 3, 16, 32)
    assert torch.all(s == 1) and torch.all(p[..., 8:24] == 1) and torch.all(p[..., :8] == 0) and torch.all(p[..., 24:] == 0)


def test_euclidean_nearest_neighbours_and_templates_match_brute_force():
    rng = np.random.default_rng(0)
    q, g = rng.standard_normal((30, 5)) * 3, rng.standard_normal((40, 5)) * rng.uniform(0.5, 3, (40, 1))
    idx, score = streamed_top1(q, g, chunk=7, query_chunk=4, metric="euclidean")
    d = np.linalg.norm(q[:, None] - g[None], axis=2)
    np.testing.assert_array_equal(idx, d.argmin(1))
    np.testing.assert_allclose(-score, d.min(1), rtol=1e-6, atol=1e-6)
    labels = np.repeat(np.arange(8), 5)
    src = rng.integers(0, 8, 30)
    ri = rank1_reid(q, src, g, labels, metric="euclidean")
    means = np.stack([g[labels == c].mean(0) for c in range(8)])
    np.testing.assert_array_equal(ri.predicted, np.linalg.norm(q[:, None] - means[None], axis=2).argmin(1))
    vm = visual_matching(q, src, g, labels, metric="euclidean")
    np.testing.assert_array_equal(vm.match_index, d.argmin(1))


def test_toml_spec_reads_the_convention_relative_to_itself(tmp_path, exported):
    _, onnx_path, _ = exported
    (tmp_path / "m.onnx").write_bytes(onnx_path.read_bytes())
    spec = tmp_path / "arc.toml"
    spec.write_text('model = "m.onnx"\nname = "arc"\nmean = [127.5, 127.5, 127.5]\nresize = "pad"\n')
    s = read_attacker_spec(spec)
    assert s.model == str(tmp_path / "m.onnx") and s.name == "arc" and s.convention.resize == "pad"
    att = load_attacker(spec)
    assert att.role == "arc" and att.kind == "onnx" and att.convention.resize == "pad"
    spec.write_text('model = "m.onnx"\ncolour = "rgb"\n')
    with pytest.raises(PfdError, match="unknown key"):
        read_attacker_spec(spec)
    spec.write_text('model = "m.onnx"\ndistance = "manhattan"\n')
    with pytest.raises(PfdError, match="distance must be one of"):
        read_attacker_spec(spec)


@pytest.mark.slow
def test_pfd_attack_with_outside_attackers_adds_their_rows(exported, tmp_path, tmp_path_factory):
    """Acceptance: `pfd attack --attacker tiny.onnx --attacker tiny.ts` writes their rows in both reports."""
    from tests.attack_world import build_world
    from tests.audit.test_engine import _layout, _raw

    world = build_world(str(tmp_path_factory.getbasetemp() / "attack-world"))  # shared with test_scorecard
    _, onnx_path, ts_path = exported
    release, state = _layout(tmp_path, world, *_raw(world))
    report = tmp_path / "report"
    res = CliRunner().invoke(main, [
        "attack", "--release", str(release), "--state-dir", str(state), "--attacker", str(onnx_path),
        "--attacker", str(ts_path), "--report", str(report), "--no-reconstruct", "--no-attributes"])
    assert res.exit_code == 3, res.output  # a raw release links: written, and refused
    data = json.loads((report / "report.json").read_text())
    roles = [a["role"] for a in data["attackers"]]
    assert roles == ["public", "insider", "tiny", "tiny#2"]
    kinds = {a["role"]: a["kind"] for a in data["attackers"]}
    assert kinds["tiny"] == "onnx" and kinds["tiny#2"] == "torchscript"
    rows = {(r["attack"], r["attacker"]) for r in data["summary"]}
    for role in ("tiny", "tiny#2"):
        assert {("VisMatch (proxies)", role), ("Rank-1 Re-ID (proxies)", role)} <= rows
    md = (report / "report.md").read_text()
    assert "| VisMatch (proxies) | tiny |" in md and "| Rank-1 Re-ID (proxies) | tiny#2 |" in md
    # The two exports of one model link identically.
    links = {(r["attacker"]): r for r in data["linkability"]}
    assert links["tiny"]["vismatch"]["count"] == links["tiny#2"]["vismatch"]["count"]


def test_pfd_attack_mia_takes_an_onnx_model(exported, tmp_path):
    _, onnx_path, _ = exported
    res = CliRunner().invoke(main, [
        "attack", "mia", "--model", str(onnx_path), "--members", f"synthetic:private,ids=8,imgs=3,size={SIZE}",
        "--nonmembers", f"synthetic:test,ids=8,imgs=3,size={SIZE}", "--folds", "2"])
    assert res.exit_code == 0, res.output
    assert "verdict" in res.output and "members 8 identities" in res.output


# -- broken or odd attacker models (issue 27) -------------------------------------------------------


def test_an_attacker_with_constant_or_zero_embeddings_is_refused_not_read_as_chance():
    faces = torch.rand(6, 3, SIZE, SIZE)
    for fn, what in ((lambda t: torch.zeros(t.shape[0], 8), "all-zero"), (lambda t: torch.ones(t.shape[0], 8), "the same")):
        att = load_outside_attacker(AttackerSpec(model=fn, name="broken", convention=InputConvention(size=SIZE)))
        with pytest.raises(PfdError, match=f"broken.*returns {what} embedding for all 6 images"):
            att.embed(faces)
    # The same image six times may share one embedding: that is the model working.
    ok = load_outside_attacker(AttackerSpec(model=lambda t: t.mean(dim=(2, 3)), name="fine",
                                            convention=InputConvention(size=SIZE)))
    assert ok.embed(faces[:1].repeat(6, 1, 1, 1)).shape == (6, 3)


def test_a_nan_attacker_names_the_model():
    att = load_outside_attacker(AttackerSpec(model=lambda t: torch.full((t.shape[0], 4), float("nan")), name="nanny",
                                             convention=InputConvention(size=SIZE)))
    with pytest.raises(PfdError, match=r"\(nanny\): model produced NaN/inf"):
        att.embed(torch.rand(3, 3, SIZE, SIZE))


def test_an_attacker_that_raises_is_not_told_to_change_its_size():
    def boom(t):
        raise ValueError("my model is broken")

    with pytest.raises(PfdError, match="model raised ValueError on a batch of 2 images .my model is broken.") as e:
        load_outside_attacker(AttackerSpec(model=boom, name="boom"))
    assert "size" not in str(e.value).split("(my model is broken)")[1]


def test_onnx_attackers_with_two_inputs_or_one_number_per_image_are_refused(tmp_path):
    class Two(torch.nn.Module):
        def forward(self, a, b):
            return a.flatten(1) + b.flatten(1)

    class Scalar(torch.nn.Module):
        def forward(self, x):
            return x.mean(dim=(1, 2, 3))  # (B,)

    ex = torch.rand(2, 3, 8, 8)
    torch.onnx.export(Two(), (ex, ex), str(tmp_path / "two.onnx"), input_names=["a", "b"], dynamo=False,
                      dynamic_axes={"a": {0: "n"}, "b": {0: "n"}})
    torch.onnx.export(Scalar(), (ex,), str(tmp_path / "scalar.onnx"), input_names=["x"], dynamo=False,
                      dynamic_axes={"x": {0: "n"}})
    with pytest.raises(PfdError, match="the ONNX graph has 2 inputs"):
        load_outside_attacker(str(tmp_path / "two.onnx"))
    with pytest.raises(PfdError, match=r"returned \(2,\) for a batch of 2 images"):
        load_outside_attacker(str(tmp_path / "scalar.onnx"), size=8)


def test_pad_sees_the_releases_own_aspect():
    """Issue 27: --attacker-resize pad did nothing, the faces were stretched to the square side first."""
    seen = {}

    def record(t):
        seen["x"] = t.clone()
        return t.mean(dim=(2, 3))

    att = load_outside_attacker(AttackerSpec(model=record, name="rec",
                                             convention=InputConvention(size=(32, 32), resize="pad", mean=0, std=255)))
    assert att.input_size((32, 16)) == (32, 16)  # the scorecard opens faces at the release's size
    att.embed(torch.ones(3, 3, 32, 16))  # a 32 x 16 (H x W) face, letterboxed into 32 x 32
    x = seen["x"]
    assert torch.all(x[..., :8] == 0) and torch.all(x[..., 24:] == 0) and torch.all(x[..., 8:24] == 1)


def test_probing_names_the_model_and_warns_when_it_hangs(caplog, monkeypatch):
    import time

    import pfd.attackers.loading as loading

    monkeypatch.setattr(loading, "PROBE_PATIENCE", 0.05)

    def slow(t):
        time.sleep(0.3)
        return t.mean(dim=(2, 3))

    with caplog.at_level("INFO", logger="pfd.attacks"):
        load_outside_attacker(AttackerSpec(model=slow, name="sloth", convention=InputConvention(size=SIZE)))
    text = caplog.text
    assert "probing slow" in text and "has not answered a batch of 2 images" in text
