"""Gate = card = attack: the audit of a release before it is written and of the written release agree.

``pfd distill``'s gate runs :func:`pfd.audit.engine.audit_in_memory` on the pixels it is
about to write; ``pfd attack`` and ``pfd card`` run :func:`pfd.audit.engine.run_scorecard`
on the written release. Over releases at chance and releases with planted leaks, every row (its
value and its verdict) and the verdict itself must be the same; a release tampered with after it
was written is refused naming the check that caught it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pfd.audit.engine import audit_in_memory, run_scorecard
from pfd.config import AttackConfig, build_config
from pfd.data.sources import open_faces
from pfd.io import sha256_file
from pfd.release.format import encode_png, to_uint8
from pfd.release.state_dir import prepare_state_dir
from pfd.release.writer import write_proxy_map, write_release
from tests.attack_world import PRIVATE, SIZE, build_world, render
from pfd.release.state_dir import write_marker

#: The run id of every release these tests write with a state dir (pfd distill records one on both sides).
RUN_ID = "5eed" * 8

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("audit-world")]

#: The audit's settings for these tests: a short reconstruction (both sides use the same ones).
ATTACKS = {"reconstruction": {"iterations": 10, "limit": 16, "batch_size": 16}}
LABEL_SEED = 5
#: Released photos per source: 20 x 6 = 120 images, enough to rule out 5x chance at chance.
PER_SOURCE = 6


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(str(tmp_path_factory.getbasetemp() / "attack-world"))


def _chance(world) -> tuple[torch.Tensor, np.ndarray]:
    """Six photos of *other* people per private identity: nothing links them to their sources.

    Each photo goes to a seeded random source (six per source): the synthetic generator draws the
    k-th person of every split from related attributes, so a fixed pairing of people would link, and
    one person's photos under one source would make the audit too clustered to rule out 5x chance."""
    other = render(open_faces(f"synthetic:test,ids=20,imgs={PER_SOURCE},size={SIZE}"))
    return other.images.clone(), np.random.default_rng(0).permutation(np.repeat(np.arange(20), PER_SOURCE))


def _cases(world) -> dict[str, tuple[torch.Tensor, np.ndarray]]:
    x, src = _chance(world)
    photo = x.clone()
    photo[0] = world.private.images[int(np.flatnonzero(world.private.labels == 7)[3])]  # someone else's photo
    shifted = x.clone()
    shifted[5] = torch.roll(world.private.images[int(np.flatnonzero(world.private.labels == 2)[1])], 3, dims=-1)
    pushed = world.held_out.images[np.flatnonzero(np.arange(len(world.held_out)) % 2 == 0)]  # unseen photos of the sources
    return {"chance": (x, src), "private photo": (photo, src), "shifted copy": (shifted, src),
            "pushed to source": (pushed, np.asarray(world.held_out.labels)[::2])}


def _state(world, root: Path, release: Path) -> Path:
    state = root / "state"
    prepare_state_dir(state, release=release)
    shutil.copy(world.lowres, state / "public_model.pt")
    shutil.copy(world.insider, state / "adapted.pt")
    (state / "config.toml").write_text(f'[distill]\nprivate = "{PRIVATE}"\nmethod = "pfd"\n')
    for f in ("public_model.pt", "adapted.pt", "config.toml"):
        (state / f).chmod(0o600)  # a state dir's files are private (pfd distill writes them so)
    return state


def _cfg(release: Path | None, state: Path) -> AttackConfig:
    layers = {"private": PRIVATE, "state_dir": str(state), "report": ""}
    if release is not None:
        layers["release"] = str(release)
    return build_config(AttackConfig, ATTACKS, layers)


def _audit_both(world, root: Path, images: torch.Tensor, source: np.ndarray):
    release = root / "release"
    state = _state(world, root, release)
    pixels = to_uint8(images).transpose(0, 3, 1, 2)  # (n, 3, H, W) uint8, what the gate sees
    gate = audit_in_memory(_cfg(None, state), proxies=pixels, source=source, private=world.private, state_dir=state,
                           method="pfd", label_seed=LABEL_SEED)
    write_marker(state, RUN_ID)
    written = write_release(release, pixels, source, method="pfd", label_seed=LABEL_SEED, state_dir=state, run_id=RUN_ID,
                            avoid_labels=world.private.identities)
    write_proxy_map(state, written, proxy_source=source, identities=world.private.identities, label_seed=LABEL_SEED)
    card = run_scorecard(_cfg(release, state), progress=False)
    return gate, card, release, state


def _table(card) -> dict[str, tuple[float, str]]:
    return {r.label: (round(r.value, 9), r.verdict) for r in card.rows if r.gates}


@pytest.fixture(scope="module")
def audited(world, tmp_path_factory):
    """Every case audited twice: by the gate in memory and by the card on the written release."""
    root = tmp_path_factory.mktemp("one-verdict")
    return {name: _audit_both(world, root / name.replace(" ", "-"), images, source)
            for name, (images, source) in _cases(world).items()}


def test_the_gate_and_the_card_give_one_verdict_on_every_release(audited):
    verdicts = {}
    for name, (gate, card, _, _) in audited.items():
        # Every figure the gate saw, the card sees, with the same value and verdict (integrity checks
        # only the written release: pfd's own writer writes what the gate passed).
        table = _table(card)
        table.pop("Release integrity")
        assert _table(gate) == table, name
        assert gate.verdict.publishable == card.verdict.publishable, name
        verdicts[name] = (card.verdict.publishable, {r.label for r in card.verdict.refusals})
    assert verdicts["chance"] == (True, set())
    for leak, check in (("private photo", "No private photo in the release"),
                        ("shifted copy", "No private photo in the release"),
                        ("pushed to source", "VisMatch (proxies) by insider")):
        publishable, refusing = verdicts[leak]
        assert not publishable and check in refusing, (leak, refusing)


def test_a_release_tampered_with_after_the_audit_is_refused_naming_the_check(world, audited, tmp_path):
    _, card, written, state = audited["chance"]
    assert card.verdict.publishable
    release = tmp_path / "release"
    shutil.copytree(written, release)
    images, _ = _chance(world)
    # 1. A PNG changed under the old manifest: the checksum no longer matches.
    first = sorted(release.glob("*/*.png"))[0]
    img = to_uint8(images[:1])[0].copy()
    img[0, 0] = 255 - img[0, 0]
    first.write_bytes(encode_png(img))
    v = run_scorecard(_cfg(release, state), progress=False).verdict
    assert not v.publishable and [r.label for r in v.failed] == ["Release integrity"]
    assert "Release integrity failed" in v.text and "checksum" in v.text
    # 2. A private photo put back in, manifest updated to match: integrity passes, the copy check does not.
    private = to_uint8(world.private.images[int(np.flatnonzero(world.private.labels == 11)[0])][None])[0]
    first.write_bytes(encode_png(private))
    manifest = json.loads((release / "manifest.json").read_text())
    manifest["files"][first.relative_to(release).as_posix()] = sha256_file(first)
    (release / "manifest.json").write_text(json.dumps(manifest))
    v = run_scorecard(_cfg(release, state), progress=False).verdict
    assert not v.publishable and [r.label for r in v.failed] == ["No private photo in the release"]
