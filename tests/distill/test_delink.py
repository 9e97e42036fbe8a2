"""pfd's de-linking term: the source identity at a balanced, uniformly random rank in the public model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.attacks.linkability.matching import rank1_reid, visual_matching
from pfd.config import RTAConfig
from pfd.distill.delink import (PublicView, delink_loss, identity_scores, jittered_rank, rank_jitter, rank_spread,
                                rank_target, target_ranks)
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


def test_target_ranks_give_each_class_one_rank_each_rank_k_times_and_are_a_pure_function_of_the_row():
    n_ids, k = 24, 10
    rows = np.arange(n_ids * k)
    r = target_ranks(rows, n_ids, k, seed=3).numpy()
    assert np.array_equal(np.bincount(r, minlength=n_ids), np.full(n_ids, k))  # each rank exactly K times
    # One rank per class: its K proxies share it, as they share every other identity's rank.
    assert all(np.unique(r[c * k:(c + 1) * k]).size == 1 for c in range(n_ids))
    halves = np.concatenate([target_ranks(rows[:100], n_ids, k, seed=3), target_ranks(rows[100:], n_ids, k, seed=3)])
    assert np.array_equal(halves, r)  # batches and shards see the same targets
    assert not np.array_equal(target_ranks(rows, n_ids, k, seed=4).numpy(), r)


def test_rank_jitter_is_a_standard_normal_draw_per_row_and_a_pure_function_of_the_row():
    n_ids, k = 100, 100
    rows = np.arange(n_ids * k)
    z = rank_jitter(rows, n_ids, k, seed=0).numpy()
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    assert np.array_equal(rank_jitter(rows[5:9], n_ids, k, seed=0).numpy(), z[5:9])
    assert not np.array_equal(rank_jitter(rows, n_ids, k, seed=1).numpy(), z)


def test_rank_spread_is_the_median_spread_of_the_other_identities_ranks_across_the_class():
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(7, 5, generator=g, dtype=torch.float64)
    source = torch.tensor([0, 0, 0, 2, 2, 2, 3])  # class 3 has one row in the batch
    got = rank_spread(scores, source)

    def ranks(rows, others):  # each other identity's rank among the others, by hand
        s = scores[rows][:, others]
        return torch.tensor([[int((s[i] > s[i, j]).sum()) for j in range(len(others))] for i in range(len(rows))],
                            dtype=torch.float64)

    a = float(ranks([0, 1, 2], [1, 2, 3, 4]).std(0).median())
    b = float(ranks([3, 4, 5], [0, 1, 3, 4]).std(0).median())
    assert torch.allclose(got[:3], torch.full((3,), a, dtype=torch.float64))
    assert torch.allclose(got[3:6], torch.full((3,), b, dtype=torch.float64))
    assert float(got[6]) == pytest.approx(float(torch.tensor([a, b]).median()))  # the batch's other classes
    # The jittered target is the exact target of the jittered rank.
    rank, z = torch.tensor([1, 1, 1, 3, 3, 3, 0]), torch.linspace(-1, 1, 7)
    assert torch.equal(rank_target(scores, source, rank, z), rank_target(scores, source, jittered_rank(rank, z, got, 5)))


@pytest.mark.parametrize("spread", [0.5, 3.0, 40.0])
def test_jittered_ranks_stay_uniform_per_proxy_with_any_spread(spread):
    """Every rank, the first and the last included, holds 1/N of the proxies (a score-space jitter
    put every draw past the best or worst other identity on rank 0 or N-1: top-1 at many times chance)."""
    n_ids, k = 24, 400
    rows = np.arange(n_ids * k)
    r = target_ranks(rows, n_ids, k, seed=0)
    z = rank_jitter(rows, n_ids, k, seed=0)
    got = jittered_rank(r, z, torch.full((len(rows),), spread), n_ids).numpy()
    assert got.min() >= 0 and got.max() <= n_ids - 1
    counts = np.bincount(got, minlength=n_ids)
    expected = len(rows) / n_ids
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 49.7, (chi2, counts)  # the chi-square 99.9 % point at 23 degrees of freedom
    assert counts[0] < 1.3 * expected and counts[-1] < 1.3 * expected
    # The class still sits at its rank: the mean over its proxies moves less than the spread.
    if spread < 5:
        cls = got.reshape(n_ids, k).mean(1)
        assert np.abs(cls - r.numpy().reshape(n_ids, k)[:, 0]).max() < max(1.0, spread)


def test_the_score_targets_of_jittered_ranks_put_sources_at_chance_on_top_and_last():
    """End to end on scores whose classes spread widely: the share of sources moved to rank 0 and to
    rank N-1 is 1/N each (within a binomial band), not the pile-up of a score-space jitter."""
    g = torch.Generator().manual_seed(5)
    n_ids, k = 30, 40
    base = torch.randn(n_ids, n_ids, generator=g, dtype=torch.float64)  # (class, identity) mean scores
    source = torch.arange(n_ids).repeat_interleave(k)
    scores = base[source] + 0.8 * torch.randn(n_ids * k, n_ids, generator=g, dtype=torch.float64)  # wide spread
    rows = np.arange(n_ids * k)
    tau = rank_target(scores, source, target_ranks(rows, n_ids, k, seed=1), rank_jitter(rows, n_ids, k, seed=1))
    moved = scores.clone()
    moved[torch.arange(len(rows)), source] = tau
    final = _rank(moved, source).numpy()
    n = len(rows)
    band = 1 / n_ids + 3.3 * np.sqrt((1 / n_ids) * (1 - 1 / n_ids) / n)
    assert (final == 0).mean() < band and (final == n_ids - 1).mean() < band, ((final == 0).mean(), band)


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

    def scores(cfg):
        res = ProxyDistiller(teacher, head, P, size=s, cfg=cfg, public=view).distill_batch(
            rows, src, batch_index=0, sources=src)
        with torch.no_grad():
            e = F.normalize(public(res.proxies), dim=1)
        reid, _ = identity_scores(e, gal, y, n_ids)
        return res, reid

    src_t = torch.as_tensor(src)
    target = target_ranks(rows, n_ids, k, seed=0)
    jitter = rank_jitter(rows, n_ids, k, seed=0)
    on, s_on = scores(dataclasses.replace(base, lambda_delink=20.0))
    off, s_off = scores(base)
    assert on.last("delink") < 0.3 * on.first("delink")

    def miss(sc):  # how far each source's score is from its jittered target, and its class's mean rank from r_c
        gap = (sc[torch.arange(len(src)), src_t] - rank_target(sc, src_t, target, jitter)).abs().mean()
        mean_rank = _rank(sc, src_t).double().view(n_ids, k).mean(1)
        return float(gap), float((mean_rank - target.view(n_ids, k)[:, 0]).abs().mean())

    (gap_on, rank_on), (gap_off, rank_off) = miss(s_on), miss(s_off)
    assert gap_on < 0.5 * gap_off, (gap_on, gap_off)
    assert rank_on < 0.8 * rank_off, (rank_on, rank_off)
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


@pytest.mark.parametrize("seed", [0, 1])
def test_uniform_source_ranks_leave_no_class_level_pattern(seed):
    """Tight classes of K prototypes (as pfd's are): eq. 3's prototypes as they are, K independent ranks
    per identity and one exact rank per identity are all linked by a class-level attack; one rank per
    class jittered as other identities vary is not."""
    from pfd.attacks.linkability.classes import class_link_test
    from pfd.distill.prototypes import uniform_source_ranks

    torch.manual_seed(seed)
    n, k, d = 24, 10, 64
    T = F.normalize(torch.randn(n, d), dim=1)
    pid = torch.arange(n).repeat_interleave(k)
    P = F.normalize(F.normalize(torch.randn(n, d), dim=1)[pid] + 0.05 * torch.randn(n * k, d), dim=1)
    P = F.normalize(P - (P * T[pid]).sum(1, keepdim=True) * T[pid], dim=1)  # eq. 3: cos 0 to its source
    rows = np.arange(n * k)
    rng = np.random.default_rng(seed)
    independent = torch.from_numpy(np.stack([rng.permutation(n) for _ in range(k)], 1).ravel())  # (n*k,) row c*k+j
    ranks, jitter = target_ranks(rows, n, k, seed=seed), rank_jitter(rows, n, k, seed=seed)

    def p(X):
        return class_link_test(X, pid.numpy(), T, np.arange(n), permutations=4000, seed=seed)["p"]

    assert p(P) < 1e-3  # the most orthogonal identity
    assert p(uniform_source_ranks(P, pid, T, independent)) < 1e-3  # the most-varying rank
    assert p(uniform_source_ranks(P, pid, T, ranks)) < 1e-3  # the least-varying rank
    X = uniform_source_ranks(P, pid, T, ranks, jitter)
    assert p(X) > 0.05
    # ... and each class's source sits at its class's rank on average (the ranks stay balanced).
    cos = X.double() @ T.double().T
    own = cos[torch.arange(n * k), pid]
    mean_rank = (cos > own[:, None]).sum(1).double().view(n, k).mean(1)
    r = ranks.view(n, k)[:, 0].double()
    assert (mean_rank - r).abs().mean() <= 1.5 and np.corrcoef(mean_rank.numpy(), r.numpy())[0, 1] > 0.9
