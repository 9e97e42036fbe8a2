"""A small world for the attack tests, built once per test session and shared by every attack test.

Two tiny models are trained (single-threaded: on a busy 2-core machine a second OpenMP thread made
these steps ~15x slower):

* ``insider``: IResNet-18 ×0.125, 32 px, trained on the 20 private synthetic identities
  (``PRIVATE``, clean domain): the publisher's adapted model / "a model trained on 20 identities";
* ``lowres``: the same architecture trained on a ``lowres`` synthetic set of other people
  (``LOWRES``): the dataset-MIA target, and the "public model" of the scorecard tests.

Everything is deterministic (seeded data order and initialisation), so the figures the tests see
are the same on every run on one machine. Modules use it through a module-scoped fixture::

    @pytest.fixture(scope="module")
    def world(tmp_path_factory):
        return build_world(str(tmp_path_factory.getbasetemp() / "attack-world"))

``functools.lru_cache`` makes the second module's fixture reuse the first one's models.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pfd.config import TrainConfig
from pfd.data.faceset import FaceSet, TensorFaces
from pfd.release.state_dir import prepare_state_dir
from pfd.release.writer import write_proxy_map, write_release
from pfd.data.synthetic import SyntheticFaces
from pfd.train import train
from pfd.release.state_dir import write_marker

#: The run id of every release these tests write with a state dir (pfd distill records one on both sides).
RUN_ID = "5eed" * 8

SIZE = 32
PRIVATE = f"synthetic:private,ids=20,imgs=10,size={SIZE}"
HOLDOUT = f"synthetic:test,ids=20,imgs=10,size={SIZE}"  # same domain (clean), other people
LOWRES = f"synthetic:private,ids=20,imgs=8,domain=lowres,seed=3,size={SIZE}"
#: Other candidates of the dataset MIA: another lowres population and three other domains.
OTHER_CANDIDATES = [
    f"synthetic:private,ids=20,imgs=8,domain=lowres,seed=4,size={SIZE}",
    f"synthetic:test,ids=20,imgs=8,domain=clean,size={SIZE}",
    f"synthetic:test,ids=20,imgs=8,domain=pose,size={SIZE}",
    f"synthetic:test,ids=20,imgs=8,domain=nir,size={SIZE}",
]
HELD_OUT_IMAGES = 2  # extra images per private identity that no model and no gallery has seen


def render(faces: FaceSet) -> TensorFaces:
    """An in-memory copy of a (synthetic) FaceSet: training must not re-render every step."""
    images = torch.stack([faces[i][0] for i in range(len(faces))])
    return TensorFaces(images, faces.labels, identities=faces.identities, attributes=faces.attributes)


@dataclass
class World:
    """Paths and data shared by the attack tests."""

    root: Path
    insider: Path
    lowres: Path
    private: TensorFaces  # PRIVATE, rendered
    held_out: TensorFaces  # HELD_OUT_IMAGES more images of each private identity, same labels


def _train(faces: FaceSet, out: Path, *, steps: int, seed: int) -> Path:
    cfg = TrainConfig(data=[], backbone="ir18", width=0.125, size=SIZE, embedding_dim=64, head="arcface",
                      max_steps=steps, batch_size=32, lr=0.1, warmup_epochs=0.5, checkpoint_every=0,
                      out=str(out), seed=seed)
    final = out / "model.pt"
    return final if final.is_file() else train(cfg, faces=faces, progress=False)


@functools.lru_cache(maxsize=None)
def build_world(root: str) -> World:
    """Train (or reuse) the two models and render the private set; see the module docstring."""
    base = Path(root)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from pfd.data.sources import open_faces

        private = render(open_faces(PRIVATE))
        more = SyntheticFaces("private", identities=20, images_per_identity=10 + HELD_OUT_IMAGES, size=SIZE)
        keep = np.flatnonzero(np.arange(len(more)) % (10 + HELD_OUT_IMAGES) >= 10)
        held = render(more.subset(keep, relabel=False))
        insider = _train(private, base / "insider", steps=200, seed=0)
        lowres = _train(render(open_faces(LOWRES)), base / "lowres", steps=150, seed=1)
    finally:
        torch.set_num_threads(threads)
    return World(root=base, insider=insider, lowres=lowres, private=private, held_out=held)


def make_release(
    out: Path, state: Path, images: torch.Tensor, sources: np.ndarray, identities: list[str], *, method: str = "raw"
) -> None:
    """Write a release of ``images`` (one class per source identity) and its proxy map."""
    prepare_state_dir(state, release=out)
    write_marker(state, RUN_ID)  # as pfd distill: the state dir and the release name one run
    written = write_release(out, images, sources, method=method, label_seed=5, state_dir=state, run_id=RUN_ID)
    write_proxy_map(state, written, proxy_source=sources, identities=identities, label_seed=5)
