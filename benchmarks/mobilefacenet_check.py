"""Does pfd load the shared pretrained MobileFaceNet exactly? Reproduce its model card's 87.9 %.

``../shared/models/README.md`` reports, measured with an independent script, 87.9 % 10-fold
verification (3,000 genuine + 3,000 impostor pairs) on the last 74 identities (sorted) of
``celeba-faces`` for the central 0.68 of each crop's width, cut 112:96 tall and resized to 96 x 112,
with the embeddings of each image and its mirror added. This script does the same through pfd
(``load_backbone`` infers the layout and the 112 x 96 input; ``Embedder(flip=True)`` fuses the
mirror; pfd's own pair sampler and 10-fold accuracy) and prints both figures: a layout, weight or
input-convention mistake (BGR, another normalisation, a stretched instead of cropped face) costs
several points, sampling noise about half of one (the pairs differ from the model card's).

Also prints the same for the low-resolution transform the privacy-utility benchmark uses
(16 wide x 19 high and back up, bilinear; the card: 57.9 %) when ``--lowres`` is given.

Usage:
    python -m benchmarks.mobilefacenet_check [--data-root DIR] [--model PATH] [--lowres]

Run by hand (the photos and the weights are outside the repository), never by the test suite.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from pfd.data.faces import FaceFolder
from pfd.data.faceset import TensorFaces
from pfd.data.pair_sampling import generate_pairs
from pfd.embed import Embedder
from pfd.nn.checkpoints import load_backbone
from pfd.verify import evaluate_pairs
from benchmarks.pu.data import center_crop_hw, degrade_lowres

#: The model card's figures (``../shared/models/README.md``).
CARD = {"celeba": 0.879, "lowres": 0.579}


def load_set(root: Path, *, last: int, hw: tuple[int, int], low: bool) -> TensorFaces:
    """The last ``last`` identities (sorted) at the model card's cut (:func:`benchmarks.pu.data.center_crop_hw`),
    optionally through the 16 x 19 low-resolution transform (:func:`benchmarks.pu.data.degrade_lowres`)."""
    folder = FaceFolder(root, size=112)  # the crops' own size: no resampling before the cut
    faces = center_crop_hw(folder.select_identities(range(folder.num_classes - last, folder.num_classes)),
                           width_frac=0.68, hw=hw)
    return degrade_lowres(faces) if low else faces


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--model", default=str(REPO.parent / "shared" / "models" / "mobilefacenet-casia.ckpt"))
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--lowres", action="store_true", help="also the 16 x 19 low-resolution domain")
    args = ap.parse_args(argv)
    root, model_path = Path(args.data_root) / "celeba-faces", Path(args.model)
    if not root.is_dir() or not model_path.is_file():
        print(f"SKIP: needs {root} and {model_path}")
        return 0
    model = load_backbone(model_path)
    print(f"{model_path.name}: {model.arch} convention {model.convention}")
    for name, low in [("celeba", False)] + ([("lowres", True)] if args.lowres else []):
        t0 = time.perf_counter()
        faces = load_set(root, last=74, hw=model.size, low=low)
        pairs = generate_pairs(faces, num_pairs=args.pairs, seed=0)
        res = evaluate_pairs(Embedder(model, batch_size=128, flip=True), pairs)
        print(f"{name}: {faces.num_classes} people, {len(faces)} images, {res['num_pairs']} pairs: 10-fold accuracy "
              f"{100 * res['accuracy']:.1f} % (model card {100 * CARD[name]:.1f} %), AUC {res['auc']:.3f}, "
              f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
