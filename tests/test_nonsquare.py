"""A model that takes non-square faces (MobileFaceNet, H x W): every command at its shape, no size flags.

The public model here is a tiny MobileFaceNet at 48 high x 32 wide (the published one is 112 x 96),
briefly trained on ``synthetic:public``. ``pfd distill --public`` without ``--size`` must take the
model's shape from the checkpoint; the proxies, the release, the lint, the scorecard, ``pfd train
--init`` and ``pfd eval`` must all work at 48 x 32 instead of stretching faces to a square.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from pfd.cli import main
from pfd.config import config_to_dict, dump_toml, load_recipe
from pfd.release.reader import read_release
from pfd.release.lint import lint_release
from pfd.nn.checkpoints import load_backbone
from tests.distill_public import tiny_distill_config, tiny_train_config
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

HW = (48, 32)
PRIVATE = "synthetic:private,ids=6,imgs=8,size=48"


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster and bitwise stable


@pytest.fixture(scope="module")
def public(tmp_path_factory) -> Path:
    from pfd.train import train

    cfg = tiny_train_config(tmp_path_factory.mktemp("public"), backbone="mobilefacenet", size=list(HW), width=0.125,
                            embedding_dim=16, data=["synthetic:public,ids=40,imgs=8,size=48"], epochs=4)
    return train(cfg, progress=False)


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def distilled(public, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nonsquare")
    tiny = config_to_dict(tiny_distill_config(public, root))
    recipe = root / "tiny.toml"
    recipe.write_text(dump_toml({"distill": {k: tiny[k] for k in ("ogp", "rta")}}))
    res = _run("distill", "--recipe", str(recipe), "--public", str(public), "--private", PRIVATE,
               "--out", str(root / "release"), "--state-dir", str(root / "state"), "--allow-linkable", "--no-progress")
    assert res.exit_code == 0, res.output[-2000:]
    return root


def test_the_public_model_records_its_shape_and_convention(public):
    model = load_backbone(public)
    assert model.arch["name"] == "mobilefacenet" and model.arch["size"] == list(HW) and model.size == HW
    assert model.convention["height"] == 48 and model.convention["width"] == 32


def test_distill_takes_the_shape_from_the_checkpoint_and_releases_it(distilled):
    cfg = load_recipe(distilled / "state" / "config.toml")["distill"]
    assert cfg["size"] == list(HW)  # no --size given: the checkpoint's
    manifest = json.loads((distilled / "release" / "manifest.json").read_text())
    assert manifest["image_size"] == list(HW) and manifest["num_images"] == 6 * 2
    for rel in manifest["files"]:
        data = (distilled / "release" / rel).read_bytes()
        assert struct.unpack(">II", data[16:24]) == (32, 48)  # PNG header: width, height
    faces = read_release(distilled / "release")
    assert faces.size == HW and faces.load(0).shape == (3, 48, 32)
    assert lint_release(distilled / "release", state_dir=distilled / "state") == []


def test_lint_refuses_a_release_of_another_shape(distilled, tmp_path):
    import shutil

    from PIL import Image

    rel = tmp_path / "release"
    shutil.copytree(distilled / "release", rel)
    manifest = json.loads((rel / "manifest.json").read_text())
    first = sorted(manifest["files"])[0]
    Image.open(rel / first).convert("RGB").resize((48, 48)).save(rel / first)  # stretched back to a square
    kinds = {f.kind for f in lint_release(rel)}
    assert "image-size" in kinds


def test_scorecard_attacks_at_the_models_shape(distilled):
    report = distilled / "report"
    res = _run("attack", "--release", str(distilled / "release"), "--state-dir", str(distilled / "state"),
               "--report", str(report), "--no-progress")
    assert res.exit_code == 0, res.output[-2000:]
    data = json.loads((report / "report.json").read_text())
    assert data["release"]["image_size"] == list(HW)
    assert {tuple(a["size"]) for a in data["attackers"]} == {HW}
    rates = [r for r in data["summary"] if r["kind"] == "rate"]
    assert len(rates) >= 8 and all(0.0 <= r["value"] <= 1.0 and r["ci95"][0] <= r["value"] <= r["ci95"][1] for r in rates)
    assert {r["attack"] for r in rates} >= {"VisMatch (proxies)", "Rank-1 Re-ID (proxies)"}
    assert "48x32 px" in (report / "report.md").read_text()


def test_train_from_the_checkpoint_and_eval_need_no_size(public, distilled, tmp_path):
    out = tmp_path / "ft"
    res = _run("train", "--init", str(public), "--data", str(distilled / "release"), "--data",
               "synthetic:public,ids=8,imgs=4,size=48", "--epochs", "1", "--batch-size", "8", "--out", str(out),
               "--no-progress")
    assert res.exit_code == 0, res.output[-2000:]
    assert load_backbone(out / "model.pt").arch["size"] == list(HW)
    res = _run("eval", "--model", str(out / "model.pt"), "--data", "synthetic:test,ids=6,imgs=4,size=48",
               "--num-pairs", "20")
    assert res.exit_code == 0, res.output[-2000:]
