"""Hostile and careless inputs to pfd card: each a one-line error before any work, nothing left behind."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pfd.attacks.scorecard.html import report_html
from pfd.cli import main
from tests.card.conftest import PUBLIC, TEST

pytestmark = pytest.mark.xdist_group("card")


def _card(card_world, *args):
    rel, st = card_world["release"], card_world["state"]
    batch = [] if "--batch-size" in args else ["--batch-size", "16"]  # the tiny public set holds 32 images
    return CliRunner().invoke(main, ["card", "--release", str(rel), "--state-dir", str(st), "--no-progress", *batch, *args])


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0"], "--seeds (seeds) = 0: must be at least 1"),
    (["--seeds", "1000000000"], "--seeds (seeds) = 1000000000: must be at most 100"),
    (["--pairs", "0"], "--pairs (card.eval.pairs) = 0: must be at least 1"),
    (["--bootstrap", "5"], "--bootstrap (card.eval.bootstrap) = 5: must be at least 10"),
    (["--epochs", "0"], "--epochs (card.downstream.epochs) = 0.0: must be a positive number"),
    (["--epochs", "1.5"], "--epochs (card.downstream.epochs) = 1.5: must be a whole number of passes over the data"),
    (["--threads", "-1"], "--threads (threads) = -1: must be at least 0"),
])
def test_out_of_range_settings_name_their_flag(card_world, tmp_path, args, message):
    r = _card(card_world, "--public", PUBLIC, "--test", TEST, "--out", str(tmp_path / "c"), *args)
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "c").exists()


def test_data_problems_are_found_before_the_card_folder_is_made(card_world, tmp_path):
    cases = {
        "missing-public": (["--public", str(tmp_path / "nowhere"), "--test", TEST], "no such file or folder"),
        "missing-test": (["--public", PUBLIC, "--test", str(tmp_path / "nowhere")], "no such file or folder"),
        "tiny-test": (["--public", PUBLIC, "--test", "synthetic:test,ids=1,imgs=3,size=32"], "too few for 10-fold"),
        "no-test": (["--public", PUBLIC], "pass --test"),
    }
    for name, (args, message) in cases.items():
        r = _card(card_world, "--out", str(tmp_path / name), *args)
        assert r.exit_code == 2 and message in r.output, (name, r.output)
        assert not (tmp_path / name).exists(), name


def test_places_the_card_may_not_go(card_world, tmp_path):
    rel, st = card_world["release"], card_world["state"]
    r = _card(card_world, "--public", PUBLIC, "--test", TEST, "--out", str(rel / "card"))
    assert r.exit_code == 2 and "inside the release" in r.output
    r = _card(card_world, "--public", PUBLIC, "--test", TEST, "--out", str(st))
    assert r.exit_code == 2 and "is the --state-dir folder" in r.output
    # Issue 34: inside the state dir, the public data or the test people (all accepted before).
    from pfd.data.sources import open_faces
    from pfd.data.synthetic import write_synthetic

    pub, test = write_synthetic(tmp_path / "pub", open_faces(PUBLIC)), write_synthetic(tmp_path / "test", open_faces(TEST))
    for out, flag in ((st / "card", "--state-dir"), (pub / "card", "--public"), (test / "card", "--test")):
        r = _card(card_world, "--public", str(pub), "--test", str(test), "--out", str(out))
        assert r.exit_code == 2 and f"the card would lie inside {flag}" in r.output and not out.exists(), r.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "card.html").write_text("my own page")
    r = _card(card_world, "--public", PUBLIC, "--test", TEST, "--out", str(mine))
    assert r.exit_code == 2 and "did not write (card.html)" in r.output
    assert [p.name for p in mine.iterdir()] == ["card.html"] and (mine / "card.html").read_text() == "my own page"


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning", "ignore::torch.jit.TracerWarning")
def test_a_model_that_is_not_a_checkpoint_and_a_state_dir_of_another_run(card_world, tmp_path):
    fake = tmp_path / "model.pt"
    fake.write_text("not a model")
    r = _card(card_world, "--public", PUBLIC, "--test", TEST, "--out", str(tmp_path / "a"), "--public-model", str(fake))
    assert r.exit_code == 2 and "model.pt: cannot read" in r.output and "re-save it" in r.output
    # A model the audit can read but nobody can fine-tune (TorchScript): refused before any card folder is made.
    import torch

    from pfd.nn.checkpoints import load_backbone

    net = load_backbone(card_world["state"] / "public_model.pt")
    scripted = tmp_path / "public.ts"
    torch.jit.save(torch.jit.trace(net.eval(), torch.rand(2, 3, 32, 32)), str(scripted), _extra_files={"pfd.json": '{"size": 32}'})
    r = _card(card_world, "--public", PUBLIC, "--test", TEST, "--out", str(tmp_path / "ts"), "--public-model", str(scripted))
    assert r.exit_code == 2 and "public.ts: a torchscript model; the card fine-tunes the public model" in r.output
    assert not (tmp_path / "ts").exists()
    other = CliRunner().invoke(main, ["card", "--release", str(card_world["release"]), "--state-dir", str(tmp_path),
                                      "--public", PUBLIC, "--test", TEST, "--out", str(tmp_path / "b")])
    assert other.exit_code == 2 and "Error:" in other.output and "Traceback" not in other.output


def test_a_recipe_typo_is_named(card_world, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text("[card]\nseedz = 3\n")
    r = _card(card_world, "--recipe", str(recipe), "--public", PUBLIC, "--test", TEST, "--out", str(tmp_path / "c"))
    assert r.exit_code == 2 and "unknown setting 'seedz'" in r.output


def test_identity_names_are_text_on_the_page_never_markup():
    evil = "<script>alert(1)</script>"
    data = {"release": {"path": "<b>r</b>"}, "private": {}, "attackers": [],
            "per_identity": [{"identity": evil, "proxies": 2, "worst": 2, "worst_row": "public/vismatch",
                              "chance_hits": 0.1, "nearest_for": 2}]}
    page = report_html(data, [])
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<b>r</b>" not in page


def test_an_identity_named_like_html_is_inert_in_card_md(card_world):
    """Issue 34: card.md wrote an identity folder named `<img src=x onerror=alert(1)>` raw (Markdown
    viewers render HTML); card.html escaped it already."""
    import copy

    from pfd.card.render import card_markdown, md_text

    data = copy.deepcopy(card_world["card"].data)
    data["privacy"]["per_identity"][0]["identity"] = "<img src=x onerror=alert(1)>"
    text = card_markdown(data)
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert md_text("a_b|c") == "a\\_b\\|c"


def test_attack_settings_read_from_the_card_recipe_name_the_card_key_not_pfd_attacks_flag(card_world, tmp_path):
    """Issue 34: `[card.attack.hubness] k = 0` was refused naming `--csls-k`, a flag of pfd attack only;
    an unknown `[card.attack.*]` table was named `[attack.*]`. Both before the card folder exists."""
    cases = {"k0": ("[card.attack.hubness]\nk = 0\n", "card.attack.hubness.k = 0: must be at least 1"),
             "table": ("[card.attack.nosuch]\nx = 1\n", "[card.attack.nosuch]: no such attack"),
             "key": ("[card.attack.hubness]\nkk = 3\n", "card.attack.hubness: unknown setting 'kk'")}
    for name, (text, message) in cases.items():
        recipe = tmp_path / f"{name}.toml"
        recipe.write_text(text)
        r = _card(card_world, "--recipe", str(recipe), "--public", PUBLIC, "--test", TEST, "--out", str(tmp_path / name))
        assert r.exit_code == 2 and message in r.output and "--csls-k" not in r.output, (name, r.output)
        assert not (tmp_path / name).exists(), name


def test_a_membership_model_batch_larger_than_its_data_names_the_setting_that_sizes_it(card_world, tmp_path):
    """Issue 34: with --holdout, the membership test's downstream model (its own settings) failed on a
    public set smaller than its batch with "lower --batch-size", a flag that sizes the card's fine-tunes only."""
    recipe = tmp_path / "r.toml"
    recipe.write_text("[card.attack.membership.downstream]\nbatch_size = 4096\n[card.attack.reconstruction]\n"
                      "enabled = false\n[card.attack.attributes]\nenabled = false\n")
    out = tmp_path / "c"
    r = _card(card_world, "--recipe", str(recipe), "--public", PUBLIC, "--test", TEST, "--out", str(out),
              "--holdout", "synthetic:test,ids=6,imgs=4,size=32,seed=7")
    assert r.exit_code == 2, r.output
    assert "set batch_size = " in r.output and "[card.attack.membership.downstream]" in r.output, r.output
    assert "--batch-size" not in r.output and not out.exists()
