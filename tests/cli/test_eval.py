"""`pfd eval` from the command line: generated pairs, a .bin and a pairs.txt give the metrics of
a direct computation; JSON output; one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from pfd.cli import main
from pfd.config import TrainConfig
from pfd.data.pair_sampling import generate_pairs
from pfd.data.pairs import write_bin
from pfd.data.synthetic import SyntheticFaces, write_synthetic
from pfd.embed import Embedder
from pfd.nn.checkpoints import load_backbone
from pfd.train import train
from pfd.verify import verification_metrics

METRICS = ("accuracy", "accuracy_std", "threshold", "tar@far=0.001", "tar@far=0.0001", "eer", "auc")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    torch.manual_seed(0)
    cfg = TrainConfig(data=["synthetic:public,ids=12,imgs=6"], backbone="ir18", width=0.125, size=32,
                      embedding_dim=16, max_steps=6, batch_size=12, lr=0.05, warmup_epochs=0.5,
                      out=str(tmp_path_factory.mktemp("evalmodel") / "run"))
    return train(cfg, progress=False)


@pytest.fixture(scope="module")
def pairs_world(tmp_path_factory, model_path):
    """The same 30 + 30 pairs of synthetic:test as a .bin, as a pairs.txt over an identity
    folder, and the metrics computed directly from the model's embeddings."""
    root = tmp_path_factory.mktemp("pairs")
    faces = SyntheticFaces("test", identities=6, images_per_identity=4, size=32)
    pairs = generate_pairs(faces, num_pairs=30, seed=1)
    images = [faces.render(int(i)) for lr in zip(pairs.left, pairs.right) for i in lr]
    write_bin(root / "pairs.bin", images, pairs.issame)
    write_synthetic(root / "images", faces)
    lines = [f"{faces.name(int(a))} {faces.name(int(b))} {int(s)}" for a, b, s in zip(pairs.left, pairs.right, pairs.issame)]
    (root / "pairs.txt").write_text("\n".join(lines) + "\n")
    emb = Embedder(load_backbone(model_path), flip=True)(faces)  # (24, 16)
    scores = (emb[pairs.left] * emb[pairs.right]).sum(1).double().numpy()
    expected = verification_metrics(scores, pairs.issame, folds=5)
    return root, expected


def _eval(*args: str):
    return CliRunner().invoke(main, ["eval", *args])


def test_generated_pairs_print_a_table_and_write_eval_json(model_path):
    res = _eval("--model", str(model_path), "--data", "synthetic:test,ids=8,imgs=4", "--num-pairs", "40",
                "--folds", "5")
    assert res.exit_code == 0, res.output
    written = model_path.with_name("eval.json")
    data = json.loads(written.read_text())
    assert set(METRICS) <= data.keys()
    assert data["num_genuine"] == data["num_impostor"] == 40 and data["pairs"] == "generated:40:seed0"
    assert data["data"] == "synthetic:test,ids=8,imgs=4"
    assert 0.0 <= data["eer"] <= 1.0 and 0.0 <= data["auc"] <= 1.0
    rows = dict(line.split(None, 1) for line in res.output.splitlines() if line.strip())
    assert rows["accuracy"] == f"{data['accuracy']:.4f} ± {data['accuracy_std']:.4f}"
    assert rows["tar@far=0.001"].startswith("n/a")  # 40 impostors cannot resolve FAR 1e-3
    assert rows["written_to"] == str(written)


@pytest.mark.parametrize("kind", ["bin", "txt"])
def test_bin_and_pairs_txt_give_the_directly_computed_metrics(model_path, pairs_world, tmp_path, kind):
    root, expected = pairs_world
    out = tmp_path / f"{kind}.json"
    extra = ["--data", str(root / "images")] if kind == "txt" else []
    res = _eval("--model", str(model_path), "--pairs", str(root / f"pairs.{kind}"), *extra, "--folds", "5",
                "--out", str(out))
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert got["num_pairs"] == 60 and got["pairs"] == str(root / f"pairs.{kind}")
    for key in ("accuracy", "accuracy_std", "threshold", "eer", "auc"):
        assert got[key] == pytest.approx(expected[key], abs=1e-6), key
    assert not model_path.with_name(f"{kind}.json").exists()


def test_errors_are_one_line(model_path, pairs_world, tmp_path):
    root, _ = pairs_world
    cases = [
        (["--model", str(tmp_path / "missing.pt")], "no such checkpoint file"),
        ([], "no model given; pass --model"),
        (["--model", str(model_path), "--pairs", str(root / "pairs.txt")], "needs its image folder; pass --data"),
        (["--model", str(model_path), "--pairs", str(tmp_path / "none.txt"), "--data", str(root / "images")],
         "no such pairs file"),
    ]
    for args, message in cases:
        res = _eval(*args)
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1, res.output


def test_recipe_eval_table_is_used(model_path, tmp_path):
    recipe = tmp_path / "r.toml"
    out = tmp_path / "r.json"
    recipe.write_text(f'[eval]\nmodel = "{model_path}"\ndata = "synthetic:test,ids=5,imgs=3"\nnum_pairs = 12\n'
                      f'folds = 3\nflip = false\nout = "{out}"\n')
    res = _eval("--recipe", str(recipe), "--num-pairs", "10")  # the flag overrides the recipe
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert got["num_genuine"] == 10 and got["flip"] is False and got["data"] == "synthetic:test,ids=5,imgs=3"
    assert np.isfinite(got["accuracy"])
