"""Edited private photos in a release: rotated, shifted, cropped, turned, inverted, pasted, tiled (issue 27)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from pfd.release.aligned_copies import calibrated_threshold, find_aligned_copies, SCORE_CEILING, SCORE_FLOOR
from pfd.data.sources import open_faces

PRIVATE = "synthetic:private,ids=12,imgs=10,size=32"


def _pil(x: torch.Tensor) -> Image.Image:
    return Image.fromarray((x.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))


def _tensor(im: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(im.convert("RGB").resize((32, 32), Image.Resampling.BILINEAR))).permute(2, 0, 1).float() / 255


def _small(x: torch.Tensor, side: int) -> torch.Tensor:
    return F.interpolate(x[None], size=side, mode="bilinear", antialias=True)[0]


@pytest.fixture(scope="module")
def world():
    faces = open_faces(PRIVATE)
    private = torch.stack([faces.load(i) for i in range(len(faces))])
    g = torch.Generator().manual_seed(5)
    proxies = (0.5 + 0.2 * torch.randn(40, 3, 32, 32, generator=g)).clamp(0, 1)  # genuine: no private structure
    return private, proxies


def _edits(private: torch.Tensor, proxy: torch.Tensor) -> dict[str, torch.Tensor]:
    p = private[17]
    jpeg = io.BytesIO()
    _pil(p).save(jpeg, format="JPEG", quality=5)
    paste60, paste_mosaic = proxy.clone(), torch.zeros(3, 32, 32)
    paste60[:, 6:25, 7:26] = _small(p, 19)
    for k, (top, left) in enumerate([(0, 0), (0, 16), (16, 0), (16, 16)]):
        paste_mosaic[:, top:top + 16, left:left + 16] = _small(private[17 + 20 * k % len(private)], 16)
    return {
        "rotated 5": _tensor(_pil(p).rotate(5, resample=Image.Resampling.BILINEAR)),
        "rotated 10": _tensor(_pil(p).rotate(10, resample=Image.Resampling.BILINEAR)),
        "mirrored, rotated 6": _tensor(_pil(p).transpose(Image.Transpose.FLIP_LEFT_RIGHT).rotate(6, resample=Image.Resampling.BILINEAR)),
        "shifted (8 px at 112)": torch.roll(p, 2, dims=2),
        "15 % cropped off each side": _tensor(_pil(p).crop((5, 5, 27, 27))),
        "the top-left 75 %": _tensor(_pil(p).crop((0, 0, 24, 24))),
        "upside down": p.flip(1).flip(2),
        "colour negative": 1 - p,
        "JPEG quality 5": _tensor(Image.open(jpeg)),
        "pasted at 60 %": paste60,
        "a 2 x 2 mosaic": paste_mosaic,
    }


def test_edited_private_photos_are_found_and_genuine_proxies_are_not(world):
    private, proxies = world
    edits = _edits(private, proxies[3])
    x = torch.cat([proxies, torch.stack([e.clamp(0, 1) for e in edits.values()])])
    found = {m.index: m for m in find_aligned_copies(x, private)}
    missed = [name for k, name in enumerate(edits) if len(proxies) + k not in found]
    assert not missed, missed
    assert not [i for i in found if i < len(proxies)]  # no genuine proxy flagged
    for k, name in enumerate(edits):
        m = found[len(proxies) + k]
        assert m.score > m.threshold >= SCORE_FLOOR
        # Each names a photo of the source's person (identity 1 holds images 10-19; a mosaic's tiles are others').
        assert name == "a 2 x 2 mosaic" or 10 <= m.private < 20, (name, m)
    assert found[len(proxies) + list(edits).index("pasted at 60 %")].how == "pasted"


def test_the_threshold_is_calibrated_on_the_release_with_a_floor():
    assert calibrated_threshold(np.full(50, 0.2)) == SCORE_FLOOR
    scores = np.r_[np.linspace(0.5, 0.7, 50)]
    assert calibrated_threshold(scores) > 0.7  # a release whose images all correlate: only outliers above the bulk


def test_a_shifted_copy_among_real_faces_is_found_however_widely_the_faces_score():
    # A release of real faces of *other* people aligns with the private photos at 0.5-0.8, so the
    # release's median + 5 robust SDs passes 1: the ceiling keeps an obvious copy (0.99) findable.
    private = torch.stack([f for f in map(open_faces(PRIVATE).load, range(120))])
    others = open_faces("synthetic:test,ids=12,imgs=4,size=32")
    x = torch.stack([others.load(i) for i in range(len(others))])
    x[5] = torch.roll(private[23], 3, dims=-1)
    found = find_aligned_copies(x, private)
    assert [m.index for m in found] == [5] and 20 <= found[0].private < 30
    assert found[0].threshold == SCORE_CEILING
    assert calibrated_threshold(np.r_[np.linspace(0.3, 0.8, 50)]) == SCORE_CEILING


def test_the_windows_of_a_block_of_photos_are_each_photos_own_windows():
    """The private photos' windows are cut a block at a time (one warp): the same pixels, in photo order."""
    from pfd.release.aligned_copies import PRIVATE_WINDOW_SCALES, _windows

    grey = torch.rand(5, 1, 32, 32, generator=torch.Generator().manual_seed(3))
    block, boxes = _windows(grey, scales=PRIVATE_WINDOW_SCALES)
    one = [_windows(grey[j : j + 1], scales=PRIVATE_WINDOW_SCALES) for j in range(5)]
    assert all(b == boxes for _, b in one) and block.shape == (5 * len(boxes), 1, 32, 32)
    assert torch.equal(block, torch.cat([w for w, _ in one]))
