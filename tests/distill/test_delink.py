"""pfd's de-linking term: the source identity at a balanced, uniformly random rank in the public model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.attacks.linkability.matching import rank1_reid, visual_matching
from pfd.config import RTAConfig
from pfd.distill.delink import PublicView, delink_loss, identity_scores, rank_target, target_ranks
from pfd.distill.rta import ProxyDistiller
from pfd.errors import PfdError
from tests.distill_stubs import CosineHead, calibrated_net, one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def _rank(scores: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    s = scores[torch.arange(len(source)), source]
    return (scores > s[:, None]).sum(1)


def test_the_rank_target_puts_the_source_at_its_rank():
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(50, 9, generator=g) * 2 - 1  # (B, N)
    source = torch.randint(0, 9, (50,), generator=g)
    for r in range(9):
        rank = torch.full((50,), r)
        moved = scores.clone()
        moved[torch.arange(50), source] = rank_target(scores, source, rank)
        assert torch.equal(_rank(moved, source), rank)
    # The extremes aim a fixed gap beyond the best / worst other identity.
    others = scores.clone()
    others[torch.arange(50), source] = float("nan")
    top = rank_target(scores, source, torch.zeros(50, dtype=torch.long))
    assert torch.allclose(top, torch.nan_to_num(others, nan=-9).max(1).values + 0.025)


def test_target_ranks_are_balanced_and_a_pure_function_of_the_row():
    n_ids, k = 24, 10
    rows = np.arange(n_ids * k)
    r = target_ranks(rows, n_ids, k, seed=3).numpy()
    assert np.array_equal(np.bincount(r, minlength=n_ids), np.full(n_ids, k))  # each rank exactly K times
    # Per identity the K targets are independent permutations' values, not one repeated rank.
    assert np.mean([np.unique(r[c * k:(c + 1) * k]).size for c in range(n_ids)]) > 5
    halves = np.concatenate([target_ranks(rows[:100], n_ids, k, seed=3), target_ranks(rows[100:], n_ids, k, seed=3)])
    assert np.array_equal(halves, r)  # batches and shards see the same targets
    assert not np.array_equal(target_ranks(rows, n_ids, k, seed=4).numpy(), r)


def test_identity_scores_are_the_attacks_own():
    g = torch.Generator().manual_seed(1)
    gallery = F.normalize(torch.randn(30, 8, generator=g), dim=1)
    gid = torch.arange(6).repeat_interleave(5)
    emb = F.normalize(torch.randn(12, 8, generator=g), dim=1)
    reid, vis = identity_scores(emb, gallery, gid, 6)
    source = np.zeros(12, dtype=int)
    assert np.array_equal(reid.argmax(1).numpy(), rank1_reid(emb, source, gallery, gid.numpy()).predicted)
    assert np.array_equal(vis.argmax(1).numpy(), visual_matching(emb, source, gallery, gid.numpy()).predicted)
    assert torch.allclose(vis.max(1).values, (emb @ gallery.T).max(1).values)


def test_delink_loss_is_zero_exactly_at_the_targets_and_pulls_towards_them():
    g = torch.Generator().manual_seed(2)
    scores = (torch.rand(20, 7, generator=g) * 2 - 1).requires_grad_(True)
    source = torch.randint(0, 7, (20,), generator=g)
    rank = torch.randint(0, 7, (20,), generator=g)
    loss = delink_loss((scores,), source, rank)
    loss.backward()
    grad = scores.grad
    # Only the source column moves, towards the target.
    mask = torch.zeros_like(grad, dtype=torch.bool)
    mask[torch.arange(20), source] = True
    assert grad[~mask].abs().max() == 0
    tau = rank_target(scores, source, rank)
    assert torch.all(torch.sign(grad[mask]) == torch.sign(scores.detach()[mask] - tau))
    at = scores.detach().clone()
    at[torch.arange(20), source] = tau
    assert float(delink_loss((at,), source, rank)) == pytest.approx(0.0, abs=1e-12)


def test_rta_with_the_delink_term_moves_the_source_to_its_target_rank():
    """On tiny random models: the public model's source ranks follow their targets with the term and
    do not without it, and the paper's proxies (weight 0) are unchanged bit for bit."""
    torch.manual_seed(0)
    n_ids, k, s, d = 6, 4, 16, 16
    teacher, public = calibrated_net(s, d), calibrated_net(s, d, seed=7)
    x = torch.rand(n_ids * 5, 3, s, s)
    y = torch.arange(n_ids).repeat_interleave(5)
    with torch.no_grad():
        gal = F.normalize(public(x), dim=1)
        P = F.normalize(teacher(x[::5]).repeat_interleave(k, 0) + 0.05 * torch.randn(n_ids * k, d), dim=1)
    head = CosineHead(d, n_ids)
    view = PublicView(public, gal, y, n_ids)
    rows = np.arange(n_ids * k)
    src = rows // k
    base = RTAConfig(iterations=80, batch_size=24, lr=0.05, lambda_rta=1.0, lambda_bn=0.0, shift=0, flip=False,
                     crop_scale=(1.0, 1.0), ipc=k, seed=0)

    def ranks(cfg):
        res = ProxyDistiller(teacher, head, P, size=s, cfg=cfg, public=view).distill_batch(
            rows, src, batch_index=0, sources=src)
        with torch.no_grad():
            e = F.normalize(public(res.proxies), dim=1)
        reid, _ = identity_scores(e, gal, y, n_ids)
        return res, _rank(reid, torch.as_tensor(src)).numpy()

    target = target_ranks(rows, n_ids, k, seed=0).numpy()
    on, r_on = ranks(dataclasses.replace(base, lambda_delink=20.0))
    off, r_off = ranks(base)
    assert on.last("delink") < 0.3 * on.first("delink")
    assert np.mean(r_on == target) > 0.7, (r_on, target)
    assert np.mean(r_off == target) < 0.5
    plain = ProxyDistiller(teacher, head, P, size=s, cfg=base).distill_batch(rows, src, batch_index=0)
    assert torch.equal(plain.proxies, off.proxies) and "delink" not in off.history


def test_the_delink_term_needs_the_sources():
    torch.manual_seed(0)
    net = calibrated_net(16, 8)
    view = PublicView(net, F.normalize(torch.randn(4, 8), dim=1), torch.arange(2).repeat_interleave(2), 2)
    cfg = RTAConfig(iterations=1, lambda_delink=1.0, ipc=1)
    with pytest.raises(PfdError, match="source identity"):
        ProxyDistiller(net, CosineHead(8, 2), None, size=16, cfg=cfg, public=view).distill_batch(
            np.arange(2), np.arange(2), batch_index=0)


def test_uniform_source_ranks_put_each_prototype_s_source_at_its_target_rank():
    import numpy as np
    import torch

    from pfd.distill.delink import target_ranks
    from pfd.distill.prototypes import uniform_source_ranks

    torch.manual_seed(0)
    n, k, d = 16, 5, 32
    T = torch.nn.functional.normalize(torch.randn(n, d), dim=1)
    pid = torch.arange(n).repeat_interleave(k)
    P = torch.nn.functional.normalize(torch.randn(n * k, d), dim=1)
    P = torch.nn.functional.normalize(P - (P * T[pid]).sum(1, keepdim=True) * T[pid], dim=1)  # eq. 3: cos 0 to its source
    ranks = target_ranks(np.arange(n * k), n, k, seed=0)
    X = uniform_source_ranks(P, pid, T, ranks)
    cos = X.double() @ T.double().T
    own = cos[torch.arange(n * k), pid]
    got = (cos > own[:, None]).sum(1)
    assert torch.equal(got, ranks)  # exactly the de-linking term's balanced design
    assert torch.allclose(X.norm(dim=1), torch.ones(n * k), atol=1e-5)
    before = (P.double() @ T.double().T)
    assert ((before > before[torch.arange(n * k), pid][:, None]).sum(1) == got).float().mean() < 0.5
