"""The source's rank: the rank-last attack and the uniformity test, calibrated under the null."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.attacks.linkability.ranks import RANKINGS, identity_ranks, rank_last, ranks_from_cos, source_rank_test, source_ranks

N, IMGS, K, D = 20, 5, 5, 32


def _world(seed: int, *, far: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
    """Private images around identity centres and proxies K per source: independent of the source
    (far = 0), or pushed away from it (far > 0)."""
    g = torch.Generator().manual_seed(seed)
    c = F.normalize(torch.randn(N, D, generator=g), dim=1)
    labels, source = np.repeat(np.arange(N), IMGS), np.repeat(np.arange(N), K)
    private = F.normalize(c[labels] + 0.3 * torch.randn(N * IMGS, D, generator=g), dim=1)
    own = F.normalize(torch.randn(N, D, generator=g), dim=1).repeat_interleave(K, 0)  # clustered by source
    proxies = F.normalize(own - far * c[source] + 0.3 * torch.randn(N * K, D, generator=g), dim=1)
    return proxies, private, labels, source


def test_ranks_against_a_sort_of_the_template_cosines():
    proxies, private, labels, source = _world(0)
    ranks, ids = identity_ranks(proxies, private, labels)
    t = F.normalize(torch.stack([private[labels == i].sum(0) for i in ids]), dim=1)
    order = torch.argsort(-(proxies.double() @ t.double().T), dim=1, stable=True).numpy()
    for i in range(len(source)):
        assert list(np.argsort(ranks[i])) == list(order[i])
    r = source_ranks(proxies, source, private, labels)
    assert r.shape == (N * K,) and r.min() >= 0 and r.max() <= N - 1


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("by", RANKINGS)
def test_ranks_break_ties_by_identity_order_as_a_stable_sort(by, threads):
    """The unstable (vectorised) sort is corrected wherever keys tie: equal cosines, +0 and -0,
    opposite cosines under ``abs``; every other row keeps the unstable sort's (unique) order; rows
    split over threads (a block of 1,100 × 257 entries) give the same ranks."""
    cos = torch.from_numpy(np.random.default_rng(2).standard_normal((1100, 257)))
    cos[0, :100] = 0.25
    cos[1, ::3] = -0.5
    cos[2] = 0.0
    cos[3, 7], cos[3, 9] = -0.0, 0.0
    cos[4] = torch.round(cos[4])
    cos[5, 10], cos[5, 200] = 0.3, -0.3  # a tie under abs only
    cos[1099] = cos[0]  # a tied row in the last thread's share too
    key = -(cos.abs() if by == "abs" else cos)
    want = torch.empty(cos.shape, dtype=torch.int64)
    want.scatter_(1, torch.argsort(key, dim=1, stable=True), torch.arange(cos.shape[1]).expand(cos.shape[0], -1))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = ranks_from_cos(cos, by)
    finally:
        torch.set_num_threads(before)
    assert got.dtype == torch.int64 and torch.equal(got, want)
    assert torch.equal(got[0, :100], got[0, 0] + torch.arange(100))  # 100 tied identities: consecutive, in order


def test_rank_last_names_the_farthest_identity():
    proxies, private, labels, source = _world(1, far=3.0)
    last = rank_last(proxies, source, private, labels)
    assert last.attack == "reid_last" and last.rate > 0.5 and last.ci95[0] > last.chance


def test_uniformity_test_is_calibrated_under_the_null_and_finds_far_sources():
    """200 null audits (proxies independent of their sources, clustered K per source): the test
    rejects at most ~5 % of them; proxies pushed away from their source are rejected."""
    rejected = covered = 0
    for seed in range(200):
        proxies, private, labels, source = _world(100 + seed)
        r = source_rank_test(proxies, source, private, labels, permutations=199, seed=seed)
        rejected += not r["uniform"]
        lo, hi = r["reid_last"]["ci95"]
        covered += lo <= r["reid_last"]["chance"] <= hi
    assert rejected <= 20, rejected  # 10 expected at 5 %; 20 is beyond 3 binomial SDs
    assert covered >= 180, covered  # the rank-last interval holds chance
    for seed in range(3):
        proxies, private, labels, source = _world(900 + seed, far=1.0)
        r = source_rank_test(proxies, source, private, labels, permutations=199)
        assert not r["uniform"] and r["mean_rank"] > 0.6, r["mean_rank"]


def test_orthogonal_reid_links_sources_pushed_to_zero_cosine_and_the_abs_rank_test_flags_them():
    import numpy as np
    import torch

    from pfd.attacks.linkability.ranks import source_rank_test

    g = torch.Generator().manual_seed(0)
    n, per, k, d = 12, 8, 4, 32
    centres = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=1)
    labels = np.repeat(np.arange(n), per)
    private = centres[labels] + 0.1 * torch.randn(n * per, d, generator=g)
    source = np.repeat(np.arange(n), k)
    q = torch.randn(n * k, d, generator=g)
    c = centres[source]
    q = q - (q * c).sum(1, keepdim=True) * c  # each proxy orthogonal to its source: eq. 3's pattern
    by_abs = source_rank_test(q, source, private, labels, permutations=4000, by="abs")
    assert by_abs["reid_last"]["rate"] > 3 / n and by_abs["p"] < 0.001  # chance 1 / n
    plain = source_rank_test(torch.randn(n * k, d, generator=g), source, private, labels, permutations=2000, by="abs")
    assert plain["p"] > 0.001 and plain["p_floor"] == pytest.approx(1 / 2001)


def test_the_data_floor_is_one_over_the_arrangements_of_sources_on_identities():
    """Issue 34: 2 identities with K = 1 gave "p = 1, ≈ chance" from a test that can never flag; the
    test reports the smallest p-value its data admit: G sources on N identities, N!/(N-G)! arrangements."""
    g = torch.Generator().manual_seed(0)
    for n_ids, k, arrangements in ((2, 1, 2), (5, 2, 120), (4, 3, 24)):
        private = F.normalize(torch.randn(n_ids * 3, 16, generator=g), dim=1)
        labels = np.repeat(np.arange(n_ids), 3)
        source = np.repeat(np.arange(n_ids), k)
        proxies = F.normalize(torch.randn(len(source), 16, generator=g), dim=1)
        t = source_rank_test(proxies, source, private, labels, permutations=200, seed=0)
        assert t["data_floor"] == pytest.approx(1 / arrangements)
        assert t["p"] >= t["data_floor"] - 1e-12


def test_the_mean_rank_interval_covers_chance_in_null_audits():
    """Releases at chance at the demo's size (24 sources x K = 10): the mean rank's 95 % interval
    (Student's t over the source means) misses 0.5 in about 5 % of audits, by cos and by |cos|."""
    n, imgs, k, d = 24, 20, 10, 64
    miss = {"cos": 0, "abs": 0}
    draws = 300
    for s in range(draws):
        g = torch.Generator().manual_seed(s)
        c = F.normalize(torch.randn(n, d, generator=g), dim=1)
        labels, source = np.repeat(np.arange(n), imgs), np.repeat(np.arange(n), k)
        private = F.normalize(c[labels] + 0.5 * torch.randn(n * imgs, d, generator=g), dim=1)
        own = F.normalize(torch.randn(n, d, generator=g), dim=1).repeat_interleave(k, 0)
        proxies = F.normalize(own + 0.5 * torch.randn(n * k, d, generator=g), dim=1)
        for by in miss:
            lo, hi = source_rank_test(proxies, source, private, labels, permutations=1, seed=s, by=by)["mean_rank_ci95"]
            miss[by] += lo > 0.5 or hi < 0.5
    # binomial(300, 0.05): more than 27 misses (9 %) has probability < 0.5 %
    assert miss["cos"] <= 27 and miss["abs"] <= 27, miss
    assert miss["cos"] + miss["abs"] >= 6, miss  # and the interval is not so wide that it never misses
