"""CSLS top-1 against the formula computed on the whole similarity matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.attacks.linkability.hubness import csls_top1, rank1_reid_csls, visual_matching_csls
from pfd.errors import PfdError


@pytest.mark.parametrize("k, chunk", [(10, 7), (3, 1000), (50, 5)])
def test_csls_top1_is_the_argmax_of_the_csls_formula(k, chunk):
    g = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(40, 16, generator=g), dim=1).double()
    gal = F.normalize(torch.randn(23, 16, generator=g), dim=1).double()
    s = q @ gal.T  # (q, g)
    kk = min(k, q.shape[0])
    r_g = s.topk(kk, dim=0).values.mean(0)  # hubness of each gallery item
    r_q = s.topk(min(k, gal.shape[0]), dim=1).values.mean(1)
    csls = 2 * s - r_g[None, :] - r_q[:, None]  # Conneau et al.'s full formula
    idx, cos = csls_top1(q, gal, k=k, chunk=chunk)
    np.testing.assert_array_equal(idx, csls.argmax(1).numpy())
    np.testing.assert_allclose(cos, s[torch.arange(40), torch.as_tensor(idx)].numpy(), rtol=1e-6)


def test_csls_attacks_score_like_the_plain_ones():
    g = torch.Generator().manual_seed(1)
    centres = F.normalize(torch.randn(10, 16, generator=g), dim=1)
    labels = np.repeat(np.arange(10), 4)
    private = F.normalize(centres[labels] + 0.1 * torch.randn(40, 16, generator=g), dim=1)
    source = np.repeat(np.arange(10), 2)
    copies = F.normalize(centres[source] + 0.1 * torch.randn(20, 16, generator=g), dim=1)  # linked proxies
    for fn in (visual_matching_csls, rank1_reid_csls):
        r = fn(copies, source, private, labels)
        assert r.rate == 1.0 and r.chance == pytest.approx(0.1) and r.attack.endswith("_csls")
    with pytest.raises(PfdError, match="no image in the private gallery"):
        visual_matching_csls(copies, source + 100, private, labels)
