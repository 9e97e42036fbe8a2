"""One tiny card of a leaky release, built once and shared by the card tests (build, render, browser)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pfd.card.config import CardConfig, CardEvalConfig, DownstreamConfig
from tests.attack_world import PRIVATE, build_world, make_release

PUBLIC = "synthetic:public,ids=8,imgs=4,size=32"
TEST = "synthetic:test,ids=8,imgs=4,size=32"
#: The privacy half without the slow parts (the scorecard's own tests cover them).
ATTACK = {"reconstruction": {"enabled": False}, "attributes": {"enabled": False}}


def leaky_release(world, root: Path) -> tuple[Path, Path]:
    """Two private photos per person released as they are (what --method raw writes): linkable by design."""
    idx = np.flatnonzero(np.arange(len(world.private)) % 10 < 2)
    release, state = root / "release", root / "state"
    make_release(release, state, world.private.images[idx], np.asarray(world.private.labels[idx]),
                 world.private.identities)
    shutil.copy(world.lowres, state / "public_model.pt")  # trained on other people: the public model
    shutil.copy(world.insider, state / "adapted.pt")
    (state / "config.toml").write_text(f'[distill]\nprivate = "{PRIVATE}"\nmethod = "raw"\n')
    return release, state


def card_config(release: Path, state: Path, out: Path, **kw) -> CardConfig:
    base = dict(release=str(release), state_dir=str(state), public=[PUBLIC], test=TEST, out=str(out),
                downstream=DownstreamConfig(epochs=1.0, batch_size=16), eval=CardEvalConfig(pairs=40, folds=4, bootstrap=50),
                attack=ATTACK)
    base.update(kw)
    return CardConfig(**base)


@pytest.fixture(scope="session")
def card_world(tmp_path_factory):
    import torch

    from pfd.card.build import make_card

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        world = build_world(str(tmp_path_factory.getbasetemp() / "attack-world"))
        root = tmp_path_factory.mktemp("card")
        release, state = leaky_release(world, root)
        cfg = card_config(release, state, root / "card")
        card = make_card(cfg, progress=False)
    finally:
        torch.set_num_threads(threads)
    return {"world": world, "root": root, "release": release, "state": state, "cfg": cfg, "card": card}
