"""The release's dataset card (issue 53): written with the release, listed in its manifest, checked by
lint and the audit, loadable where data sets are loaded, and proof against what a hostile publisher
or identity name puts around it."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from pfd.cli import main
from pfd.config.checks import check_license
from pfd.data.faceset import TensorFaces
from pfd.errors import PfdError
from pfd.io import sha256_file
from pfd.release.dataset_card import card_vocabulary, dataset_card, settings_digest, size_category
from pfd.release.format import CARD, MANIFEST
from pfd.release.lint import lint_release
from pfd.release.state_dir import prepare_state_dir, write_marker
from pfd.release.writer import clear_interrupted_release, write_proxy_map, write_release

RUN_ID = "c0de" * 8
N, K, S = 6, 2, 16
AUDIT = {"version": 3, "level": 0.01, "figures": 27, "checks": 3, "publishable": True, "largest_rate_over_chance": 1.3,
         "rules_out_share": 0.6412, "rules_out_multiple": 3.847, "people": 6, "failed": 0, "rule_out": 5.0, "bound": 0.3}


def _card(**kw):
    args = dict(num_classes=N, num_images=N * K, image_size=S, method="pfd", pfd_version="0.1.0",
                settings_digest="ab" * 32, audit=AUDIT)
    return dataset_card(**{**args, **kw})


def _front_matter(text: str) -> dict[str, object]:
    """The YAML front matter, read as a YAML loader would for this flat subset (key: value, - item)."""
    assert text.startswith("---\n")
    body = text[4:text.index("\n---\n", 4)]
    out: dict[str, object] = {}
    key = None
    for line in body.splitlines():
        if line.startswith("- "):
            assert key is not None
            out.setdefault(key, [])
            out[key].append(line[2:])  # type: ignore[union-attr]
        else:
            key, _, value = line.partition(": ") if ": " in line else (line.rstrip(":"), "", "")
            if value:
                out[key] = value
    return out


@pytest.fixture
def published(tmp_path):
    """A release written with its card, its state dir and the private set (hostile identity names)."""
    names = ["---\nlicense: mit", "# Alice <script>", "bob: [1, 2]", "carol`rm -rf`", "dave\r\nx", "erin|table|"]
    x = torch.rand(N * K, 3, S, S, generator=torch.Generator().manual_seed(0))
    cls = np.repeat(np.arange(N), K)
    rel, sd = tmp_path / "release", tmp_path / "state"
    prepare_state_dir(sd, release=rel)
    write_marker(sd, RUN_ID)
    w = write_release(rel, x, cls, method="pfd", label_seed=0, state_dir=sd, run_id=RUN_ID, audit=AUDIT, card=_card(),
                      avoid_labels=names)
    write_proxy_map(sd, w, proxy_source=cls, identities=names, label_seed=0)
    private = TensorFaces(torch.rand(N * K, 3, S, S, generator=torch.Generator().manual_seed(1)), cls, identities=names,
                          names=[f"photo_{i:04d}_secret.jpg" for i in range(N * K)])
    return rel, sd, private, w, x, cls


def test_the_card_has_the_hubs_front_matter_and_says_what_the_release_is():
    text = _card()
    fm = _front_matter(text)
    assert fm == {"license": "cc-by-nc-4.0", "task_categories": ["image-classification"],
                  "tags": ["face-recognition", "synthetic", "privacy", "dataset-distillation", "pfd"],
                  "size_categories": ["n<1K"], "pretty_name": "pfd proxy faces (6 classes)"}
    for words in ("no image is a photo of anyone", "arbitrary permutation", "version 3", "27 figures and 3 checks",
                  "64.1 % of the 6 people (3.8× chance)", "Out of scope: identifying", 'load_dataset("imagefolder"',
                  "ImageFolder(", "0.1.0", "ab" * 32):
        assert words in text, words
    raw = _card(method="raw", real_images=True, audit=None)
    assert "real photos of the people of a private set" in raw and "no image is a photo" not in raw
    assert "No audit verdict is recorded" in raw
    assert [size_category(n) for n in (999, 1000, 10_000, 250_000, 2_000_000)] == [
        "n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M"]


def test_the_settings_digest_leaves_out_paths_and_how_a_run_runs():
    base = {"private": "/home/alice/faces", "method": "pfd", "resume": False, "threads": 2, "rta": {"ipc": 10}}
    moved = {**base, "private": "/data/other", "resume": True, "threads": 8}
    assert settings_digest(base) == settings_digest(moved) != settings_digest({**base, "rta": {"ipc": 5}})


def test_the_release_lists_its_card_and_lint_accepts_exactly_that_file(published):
    rel, sd, private, w, *_ = published
    m = json.loads((rel / MANIFEST).read_text())
    assert m["card"] == {"file": CARD, "sha256": sha256_file(rel / CARD)} and CARD not in m["files"]
    assert (rel / CARD).read_text().startswith("---\n")
    assert oct(os.stat(rel / CARD).st_mode & 0o777) == "0o644"
    assert lint_release(rel, private=private, state_dir=sd) == []


# -- hostile cases (issue 53, deliverable 5) ----------------------------------------------------


def test_hostile_identity_names_never_reach_the_card(published):
    """1. Identity names built to inject YAML, Markdown, HTML or shell into the card: the card is made
    from aggregates only, so it is the same card whatever the names."""
    rel, *_ = published
    text = (rel / CARD).read_text()
    assert text == _card()
    for bad in ("license: mit", "<script>", "bob: [1, 2]", "rm -rf", "|table|", "secret"):
        assert bad not in text


@pytest.mark.parametrize("edit", ["edited", "swapped", "deleted", "symlinked", "mode 0600"])
def test_a_card_changed_after_publishing_fails_lint_and_the_audit(published, tmp_path, edit):
    """2-6. The card edited, swapped for another release's, deleted, replaced by a symlink, or made
    private: lint names it, and the audit's integrity check (which is the lint) fails with it."""
    from types import SimpleNamespace

    from pfd.audit.checks import IntegrityCheck
    from pfd.audit.contract import Clock

    rel, sd, *_ = published
    card = rel / CARD
    if edit == "edited":
        card.write_text(card.read_text().replace("cc-by-nc-4.0", "cc0-1.0"))
    elif edit == "swapped":
        card.write_text(_card(num_classes=7))
    elif edit == "deleted":
        card.unlink()
    elif edit == "symlinked":
        other = tmp_path / "elsewhere.md"
        other.write_text(card.read_text())
        card.unlink()
        card.symlink_to(other)
    else:
        os.chmod(card, 0o600)
    kinds = {f.kind for f in lint_release(rel, state_dir=sd)}
    want = {"edited": {"checksum"}, "swapped": {"checksum"}, "deleted": {"missing-file"}, "symlinked": {"link"},
            "mode 0600": {"release-mode"}}[edit]
    assert want <= kinds, kinds
    inputs = SimpleNamespace(state=SimpleNamespace(release=rel, state_dir=sd), clock=Clock())
    row = IntegrityCheck(None).run(inputs).rows()[0]
    assert row.passed is False


def test_a_readme_the_manifest_does_not_list_or_a_card_entry_pointing_elsewhere_fails(published):
    """7-8. A README.md with the manifest's card entry removed, and a card entry naming another file."""
    rel, sd, *_ = published
    m = json.loads((rel / MANIFEST).read_text())
    card = m.pop("card")
    (rel / MANIFEST).write_text(json.dumps(m))
    assert [f.kind for f in lint_release(rel, state_dir=sd)] == ["unexpected-file"]
    m["card"] = {**card, "file": "../state/proxy_map.json"}
    (rel / MANIFEST).write_text(json.dumps(m))
    kinds = [f.kind for f in lint_release(rel, state_dir=sd)]
    assert "manifest" in kinds and "unexpected-file" in kinds, kinds


def test_a_hand_written_card_naming_a_source_fails_lint_with_the_private_set(published):
    """9. A card rewritten to name a private person (its checksum updated in the manifest)."""
    rel, sd, private, *_ = published
    text = (rel / CARD).read_text() + "\nThanks to photo_0003_secret for the photos.\n"
    (rel / CARD).write_text(text)
    m = json.loads((rel / MANIFEST).read_text())
    m["card"]["sha256"] = sha256_file(rel / CARD)
    (rel / MANIFEST).write_text(json.dumps(m))
    f = lint_release(rel, private=private, state_dir=sd)
    assert [(x.kind, x.path) for x in f] == [("source-name", CARD)] and "photo_0003_secret" in f[0].detail
    assert "photo_0003_secret" not in card_vocabulary()


def test_a_readme_inside_a_label_folder_is_a_stray_file(published):
    """10. A README.md one level down (0000/README.md): not the card, not a proxy."""
    rel, sd, *_ = published
    label = sorted(p for p in rel.iterdir() if p.is_dir())[0]
    shutil.copy(rel / CARD, label / CARD)
    kinds = {f.kind for f in lint_release(rel, state_dir=sd)}
    assert "unexpected-file" in kinds and "proxy-map" in kinds, kinds


@pytest.mark.parametrize("value", ["mit\nfoo: bar", "CC BY 4.0", "cc-by-4.0\r", "", "---", "mit # comment", "x" * 80])
def test_a_licence_that_is_not_an_identifier_is_one_line_naming_the_flag(value):
    """11-12. --license with a newline, a space, YAML or a comment: it goes into the card's YAML."""
    with pytest.raises(PfdError, match=r"^release\.license \(--license\) = .*not a licence identifier") as e:
        check_license(value)
    assert "\n" not in str(e.value).replace(repr(value), "")
    assert check_license("cc-by-4.0") == "cc-by-4.0" and check_license("other") == "other"


def test_the_license_flag_reaches_the_card_and_a_bad_one_is_refused_before_any_work(tmp_path):
    res = CliRunner().invoke(main, ["distill", "--license", "mit\nx: y", "--out", str(tmp_path / "r"),
                                    "--state-dir", str(tmp_path / "s")])
    assert res.exit_code == 2 and "--license" in res.output and "not a licence identifier" in res.output
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_a_release_folder_that_already_holds_a_readme_is_not_written_over(tmp_path):
    """13. An --out holding someone's README.md (and no manifest): refused, the file untouched."""
    out = tmp_path / "rel"
    out.mkdir()
    (out / CARD).write_text("my notes")
    with pytest.raises(PfdError, match="not empty and not a pfd release"):
        write_release(out, torch.rand(4, 3, 8, 8), [0, 0, 1, 1], method="pfd", label_seed=0, card=_card())
    assert (out / CARD).read_text() == "my notes"


def test_resume_republishes_the_card_and_refuses_a_readme_added_to_a_release_without_one(published, tmp_path):
    """14. --resume rewrites its own card (listed), but not a README.md someone added to a release
    published without a card."""
    rel, sd, private, w, x, cls = published
    again = write_release(rel, x, cls, method="pfd", label_seed=0, state_dir=sd, run_id=RUN_ID, audit=AUDIT,
                          card=_card(license="mit"), resume=True)
    assert again.manifest["card"]["sha256"] == sha256_file(rel / CARD) and "license: mit" in (rel / CARD).read_text()
    plain = tmp_path / "plain"
    write_release(plain, x, cls, method="pfd", label_seed=0, run_id=RUN_ID)
    (plain / CARD).write_text("added later")
    with pytest.raises(PfdError, match=r"README\.md: not part of the previous pfd release"):
        write_release(plain, x, cls, method="pfd", label_seed=0, run_id=RUN_ID, card=_card(), resume=True)


def test_a_card_left_by_a_killed_write_is_cleared_like_the_images(tmp_path):
    """15. Killed after the card, before the manifest: the half-written release is cleared as a whole."""
    out = tmp_path / "rel"
    (out / "0000").mkdir(parents=True)
    (out / "0000" / "000.png").write_bytes(b"x")
    (out / CARD).write_text(_card())
    clear_interrupted_release(out)
    assert not any(out.rglob("*"))


# -- loads where people load data (issue 53, deliverable 2) -------------------------------------


def test_the_release_loads_with_datasets_imagefolder_and_torchvision(published, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    from torchvision.datasets import ImageFolder

    rel, *_ = published
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    ds = datasets.load_dataset("imagefolder", data_dir=str(rel), split="train", cache_dir=str(tmp_path / "hf"))
    m = json.loads((rel / MANIFEST).read_text())
    assert len(ds) == m["num_images"] and ds.features["label"].names == sorted(m["images_per_class"])
    assert np.bincount(ds["label"]).tolist() == [m["images_per_class"][lab] for lab in sorted(m["images_per_class"])]
    tv = ImageFolder(str(rel))
    assert len(tv) == m["num_images"] and tv.classes == sorted(m["images_per_class"])
    assert sorted(os.path.relpath(p, rel) for p, _ in tv.samples) == sorted(m["files"])  # every proxy once
