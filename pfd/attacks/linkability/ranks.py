"""Where a proxy's source ranks among the private identities: the rank-last attack and a uniformity test.

Rank-1 Re-ID names the *nearest* identity template. A proxy that is reliably *far* from its source
is linkable too: an attacker who names the farthest identity wins whenever the source ranks last.
pfd's de-linking term (:mod:`pfd.distill.delink`) therefore aims at a uniformly random rank, and
this module checks the result on any release, by any model:

* :func:`source_ranks`: the rank of each proxy's source among the ``N`` identity templates of the
  private gallery (``norm(Σ e)``, as Re-ID), 0 = nearest, ``N - 1`` = farthest;
* :func:`rank_last`: the attack that names the farthest identity, scored like Re-ID (a
  :class:`~pfd.attacks.linkability.matching.LinkabilityResult` with the same composition chance and
  clustered interval);
* :func:`uniformity_test`: a permutation test of "the source's rank is uniform". Under the null
  (proxies carry nothing of their sources) the K proxies of one source are exchangeable with any
  other identity's, so assigning each source's group of proxies to a random other identity gives
  the statistic's null distribution exactly, whatever the clustering; the statistic is the
  chi-square distance of the ranks' histogram (``bins`` equal bins of the N ranks) from uniform,
  which sees a pull to the near end, to the far end, or to both.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

import numpy as np
import torch
from scipy.stats import t as student_t

from pfd.attacks.linkability.matching import LinkabilityFigures, LinkabilityResult, _as_tensor, _check_sources, _result, _unit
from pfd.errors import PfdError

__all__ = ["UniformityTest", "SourceRankTest", "AttackerSourceRank", "RANKINGS", "BLOCK", "block_rows", "identity_templates", "ranks_from_cos", "rank_blocks", "identity_ranks",
           "source_ranks", "rank_last", "injections", "uniformity_test", "source_rank_test"]


class UniformityTest(TypedDict):
    """The permutation test that the source's rank is uniform (:func:`uniformity_test`), JSON-ready.

    Attributes:
        statistic: The chi-square statistic of the binned ranks; ``p`` its permutation p-value,
            ``p_floor`` the smallest p these draws reach, ``data_floor`` the smallest any number does.
        permutations: Draws of the null; ``bins`` bins of the ranks.
        histogram: Proxies per bin; ``expected`` under the null.
        mean_rank: Mean normalised rank (0 nearest, 1 farthest), its 95 % interval over source
            identities and its chance value (0.5).
        uniform: Whether ``p > 0.05``.
    """

    statistic: float
    p: float
    p_floor: float
    data_floor: float
    permutations: int
    bins: int
    histogram: list[int]
    expected: list[float]
    mean_rank: float
    mean_rank_ci95: list[float]
    chance_mean_rank: float
    uniform: bool


class SourceRankTest(UniformityTest):
    """:func:`source_rank_test`: the ranking (``by``), the rank-last attack's figures and the test."""

    by: str
    reid_last: LinkabilityFigures


class AttackerSourceRank(SourceRankTest):
    """One attacker's :class:`SourceRankTest` (``report.json``'s ``source_rank`` entries)."""

    attacker: str


#: How identities are ranked: by cosine to the template (0 = nearest), or by its absolute value
#: (0 = the largest ``|cos|``; the last rank is the identity most orthogonal to the proxy).
RANKINGS = ("cos", "abs")


def identity_templates(private_emb: Any, private_labels: Any) -> tuple[torch.Tensor, np.ndarray]:
    """Re-ID's identity templates ``t_c = norm(Σ_{i∈c} e_i)`` of unit private embeddings, in float64.

    Returns:
        ``(templates (N, D), identities (N,))``.

    Raises:
        PfdError: The embeddings and labels differ in number.
    """
    lab = np.asarray(private_labels).ravel()
    e = _unit(_as_tensor(private_emb, "private embeddings").to(torch.float64))
    if lab.shape[0] != e.shape[0]:
        raise PfdError(f"{e.shape[0]} private embeddings but {lab.shape[0]} labels; pass one per image")
    uniq, inv = np.unique(lab, return_inverse=True)
    return _unit(torch.zeros(len(uniq), e.shape[1], dtype=e.dtype).index_add_(0, torch.as_tensor(inv), e)), uniq


#: Entries of one block of the proxies × identities rank matrix (32 MiB as int64): the matrix is
#: scanned block by block, never held whole (10^5 proxies × 10^4 identities would be 8 GB).
BLOCK = 1 << 22


def block_rows(n_ids: int) -> int:
    """Proxies per block of a scan over ``n_ids`` identities (:data:`BLOCK`)."""
    return max(1, BLOCK // max(int(n_ids), 1))


#: Entries below which one thread sorts a block (a thread pool costs more than it saves).
_PARALLEL_FROM = 1 << 18


def _argsort_rows(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, axis=1)``, rows split over torch's intra-op threads (numpy's sort releases the GIL
    but runs on one thread; at 10^4 identities the rank scans are an audit's largest cost)."""
    threads = min(torch.get_num_threads(), len(key))
    if threads <= 1 or key.size < _PARALLEL_FROM:
        return np.argsort(key, axis=1)
    out = np.empty(key.shape, dtype=np.intp)
    bounds = np.linspace(0, len(key), threads + 1).astype(int)

    def part(i: int) -> None:
        out[bounds[i] : bounds[i + 1]] = np.argsort(key[bounds[i] : bounds[i + 1]], axis=1)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(part, range(threads)))
    return out


def ranks_from_cos(cos: torch.Tensor, by: str = "cos") -> torch.Tensor:
    """``(c, N)`` cosines -> ``(c, N)`` int64 rank of each identity (0 = nearest, ties by identity order).

    The rows are sorted by numpy's unstable sort (vectorised where the CPU allows: half the time of a
    stable sort at N = 10^4, the largest cost of an audit's permutation tests); a row with two equal
    keys is sorted again stably, so the ranks are the stable order's, bit for bit, on every CPU.
    """
    if by not in RANKINGS:
        raise ValueError(f"by must be one of {RANKINGS}, got {by!r}")
    key = -(cos.abs() if by == "abs" else cos)  # (c, N) ascending key: nearest first
    order = torch.from_numpy(_argsort_rows(key.numpy()))  # (c, N) identities, first first; ties in any order
    ordered = key.gather(1, order)
    tied = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1)  # (c,) rows whose order a tie leaves open
    if bool(tied.any()):
        order[tied] = torch.argsort(key[tied], dim=1, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(key.shape[1]).expand_as(order))
    return ranks


def rank_blocks(proxy_emb: Any, templates: torch.Tensor, *, by: str = "cos",
                rows: int | None = None) -> Iterator[tuple[int, np.ndarray, torch.Tensor]]:
    """The rank matrix of :func:`identity_ranks`, block by block (memory: one block).

    Args:
        proxy_emb: ``(q, D)`` proxy embeddings.
        templates: ``(N, D)`` unit identity templates (:func:`identity_templates`).
        by: ``"cos"`` or ``"abs"``.
        rows: Proxies per block (default :func:`block_rows`).

    Yields:
        ``(first row, ranks (c, N) int64, cosines (c, N))``.
    """
    q = _unit(_as_tensor(proxy_emb, "proxy embeddings").to(torch.float64))
    step = rows or block_rows(templates.shape[0])
    for lo in range(0, q.shape[0], step):
        cos = q[lo : lo + step] @ templates.T  # (c, N)
        yield lo, ranks_from_cos(cos, by).numpy(), cos


def identity_ranks(proxy_emb: Any, private_emb: Any, private_labels: Any, *, by: str = "cos") -> tuple[np.ndarray, np.ndarray]:
    """Rank of every identity for every proxy, by cosine to the identity templates (held whole: for
    small sets and tests; the attacks scan it with :func:`rank_blocks`).

    Args:
        proxy_emb: ``(q, D)`` proxy embeddings.
        private_emb: ``(g, D)`` private image embeddings.
        private_labels: ``(g,)`` their identities.
        by: ``"cos"`` or ``"abs"`` (:data:`RANKINGS`).

    Returns:
        ``(ranks (q, N) int64, identities (N,))``: ``ranks[i, j]`` is identity ``identities[j]``'s
        rank for proxy ``i`` (0 = nearest template, or largest ``|cos|``; ties broken by identity order).
    """
    if by not in RANKINGS:
        raise ValueError(f"by must be one of {RANKINGS}, got {by!r}")
    templates, uniq = identity_templates(private_emb, private_labels)  # (N, D)
    blocks = [r for _, r, _ in rank_blocks(proxy_emb, templates, by=by)]
    return (np.concatenate(blocks) if blocks else np.zeros((0, len(uniq)), dtype=np.int64)), uniq


def _source_columns(uniq: np.ndarray, src: np.ndarray) -> np.ndarray:
    return np.searchsorted(uniq, src)


def source_ranks(proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any) -> np.ndarray:
    """``(q,)`` rank of each proxy's source identity among the N templates (0 = nearest)."""
    src = np.asarray(proxy_source).ravel()
    lab = np.asarray(private_labels).ravel()
    _check_sources(src, lab, len(proxy_emb))
    templates, uniq = identity_templates(private_emb, lab)
    col = _source_columns(uniq, src)
    out = np.empty(len(src), dtype=np.int64)
    for lo, r, _ in rank_blocks(proxy_emb, templates):
        out[lo : lo + len(r)] = r[np.arange(len(r)), col[lo : lo + len(r)]]
    return out


def rank_last(proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any, *, by: str = "cos") -> LinkabilityResult:
    """The attack that names each proxy's *farthest* identity template; success if that is the source.

    With ``by="abs"`` it names the identity whose template is most *orthogonal* to the proxy
    (smallest ``|cos|``): the "orthogonal Re-ID", which links proxies whose sources were pushed to
    ``cos ≈ 0`` (OGP's eq. 3 on its own).

    Returns:
        A :class:`~pfd.attacks.linkability.matching.LinkabilityResult` with ``attack="reid_last"``
        (``"reid_orthogonal"`` by ``|cos|``; chance and interval as Re-ID's); ``score`` is the cosine
        to the named template.
    """
    src = np.asarray(proxy_source).ravel()
    lab = np.asarray(private_labels).ravel()
    _check_sources(src, lab, len(proxy_emb))
    if by not in RANKINGS:
        raise ValueError(f"by must be one of {RANKINGS}, got {by!r}")
    templates, uniq = identity_templates(private_emb, lab)
    idx = np.empty(len(src), dtype=np.int64)
    for lo, r, _ in rank_blocks(proxy_emb, templates, by=by):
        idx[lo : lo + len(r)] = r.argmax(1)  # the identity at rank N - 1
    return _last(proxy_emb, src, templates, uniq, idx, by)


def _last(proxy_emb: Any, src: np.ndarray, templates: torch.Tensor, uniq: np.ndarray, idx: np.ndarray,
          by: str) -> LinkabilityResult:
    """The rank-last attack's result from the identity each proxy ranks last (``idx``, column indices)."""
    q = _unit(_as_tensor(proxy_emb, "proxy embeddings").to(torch.float64))
    score = (q * templates[torch.as_tensor(idx)]).sum(1).numpy()
    return _result("reid_last" if by == "cos" else "reid_orthogonal", uniq[idx], src, idx, score, uniq)


@functools.lru_cache(maxsize=1)
def _injections(seed: tuple[int, ...], n_ids: int, n_groups: int, permutations: int) -> np.ndarray:
    rng = np.random.default_rng(list(seed))
    out = np.empty((permutations, n_groups), dtype=np.int32)
    step = max(1, 2_000_000 // max(n_ids, 1))  # rows of uniforms at a time; the stream is the same whatever the step
    for lo in range(0, permutations, step):
        p_n = min(step, permutations - lo)
        out[lo : lo + p_n] = np.argsort(rng.random((p_n, n_ids)), axis=1)[:, :n_groups]
    out.flags.writeable = False  # shared by every test of one audit
    return out


def injections(seed: tuple[int, ...], n_ids: int, n_groups: int, permutations: int) -> np.ndarray:
    """The permutation null's draws: ``(P, G)`` int32, each row ``G`` distinct identities of ``N``
    (the first ``G`` of a uniformly random permutation), from ``default_rng(seed)``.

    The six source-rank tests of an audit (three attackers, by cos and by |cos|) draw the same
    injections, as do its three class-level tests: the last draw is kept (one), so an audit at
    10^4 identities sorts 20,000 random permutations once per test family, not once per test.

    Args:
        seed: The generator's seed sequence.
        n_ids: Identities N.
        n_groups: Groups G ≤ N (source identities).
        permutations: Draws P.

    Returns:
        The read-only ``(P, G)`` array.
    """
    return _injections(tuple(int(v) for v in seed), int(n_ids), int(n_groups), int(permutations))


def _chi2(hist: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``(P, b)`` counts -> ``(P,)`` chi-square distances from ``expected``."""
    return ((hist - expected) ** 2 / expected).sum(1)


def _per_bin(binned: np.ndarray, b: int) -> np.ndarray:
    """``(P, c)`` bin of each entry -> ``(P, b)`` counts."""
    return np.stack([(binned == j).sum(1) for j in range(b)], axis=1)


def uniformity_test(ranks: np.ndarray | None, source: np.ndarray, n_ids: int, *, bins: int = 10,
                    permutations: int = 2000, seed: int = 0,
                    rank_matrix: np.ndarray | Iterable[tuple[int, np.ndarray]] | None = None,
                    identities: np.ndarray | None = None) -> UniformityTest:
    """Permutation test that the source's rank is uniform over ``{0, ..., N-1}``.

    Args:
        ranks: ``(q,)`` rank of each proxy's source (``None``: read from ``rank_matrix``).
        source: ``(q,)`` each proxy's source identity.
        n_ids: Identities N.
        bins: Equal bins of the ranks for the chi-square statistic (at most N).
        permutations: Random reassignments of source groups to identities.
        seed: Seed of the permutations.
        rank_matrix: ``(q, N)`` rank of every identity for every proxy (:func:`identity_ranks`), or
            its blocks ``(first row, (c, N) ranks)`` in row order (:func:`rank_blocks`); it makes
            the test exact. Without it the null is the discrete uniform itself (each proxy
            independent), which ignores the clustering of K proxies per source.
        identities: The sorted identities of ``rank_matrix``'s columns (default: the sources are
            column indices).

    Returns:
        ``statistic``, ``p`` (permutation p-value), ``p_floor`` (its smallest value with these
        draws), ``data_floor`` (the smallest any number of draws reaches with these identities and
        sources: ``(N-G)!/N!``), ``mean_rank`` (normalised to [0, 1], 0.5 at
        uniform) with a 95 % interval over the source identities (their mean ranks, so clustered),
        ``histogram`` (counts per bin), ``expected`` (per bin at uniform), ``uniform`` (``p > 0.05``).
    """
    source = np.asarray(source).ravel()
    if ranks is None and rank_matrix is None:
        raise ValueError("uniformity_test needs the source ranks or the rank matrix")
    q = len(source)
    b = max(1, min(int(bins), int(n_ids)))
    edges = np.linspace(0, n_ids, b + 1)
    width = np.histogram(np.arange(n_ids), bins=edges)[0]  # ranks per bin (bins may differ by one)
    expected = q * width / n_ids
    rng = np.random.default_rng([int(seed), 11])
    groups, where = np.unique(source, return_inverse=True)
    bin_of = np.searchsorted(edges, np.arange(n_ids), side="right") - 1  # (N,) each rank's bin

    exceed, done, chunk = 0, 0, max(1, 2_000_000 // max(q, 1))
    if rank_matrix is None:
        ranks = np.asarray(ranks, dtype=np.int64)
        t = float(_chi2(np.histogram(ranks, bins=edges)[0][None, :], expected)[0])
        while done < permutations:
            p_n = min(chunk, permutations - done)
            got = bin_of[rng.integers(0, n_ids, (p_n, len(ranks)))]  # (P, q) bins of independent uniform ranks
            exceed += int((_chi2(_per_bin(got, b), expected) >= t - 1e-12).sum())
            done += p_n
    else:
        # Each source's K proxies go, together, to a random identity (all distinct): exact under
        # exchangeability. The draws are made first, then the rank matrix is read block by block.
        pick = injections((int(seed), 11), n_ids, len(groups), permutations)  # (P, groups)
        hist = np.zeros((len(pick), b), dtype=np.int64)
        blocks = [(0, rank_matrix)] if isinstance(rank_matrix, np.ndarray) else rank_matrix
        col = np.searchsorted(np.asarray(identities), source) if identities is not None else source
        read = np.empty(q, dtype=np.int64)  # (q,) the source's rank, read from the matrix
        for lo, block in blocks:
            rows = np.arange(len(block))
            read[lo : lo + len(block)] = block[rows, col[lo : lo + len(block)]]
            binned = bin_of[block].astype(np.uint8 if b < 256 else np.int64)  # (c, N) each identity's rank bin
            got = binned[rows[None, :], pick[:, where[lo : lo + len(block)]]]  # (P, c)
            hist += _per_bin(got, b)
        ranks = read if ranks is None else np.asarray(ranks, dtype=np.int64)
        t = float(_chi2(np.histogram(ranks, bins=edges)[0][None, :], expected)[0])
        exceed = int((_chi2(hist, expected) >= t - 1e-12).sum())
    p = (1 + exceed) / (1 + permutations)
    # The data bound the test too: G source groups placed on N identities have N!/(N-G)! arrangements
    # (N**q without the matrix), so no p-value falls below 1/arrangements, however many draws.
    g = len(groups) if rank_matrix is not None else len(ranks)
    log_arr = (math.lgamma(n_ids + 1) - math.lgamma(n_ids - g + 1)) if rank_matrix is not None else g * math.log(max(n_ids, 1))
    data_floor = math.exp(-log_arr) if log_arr < 700 else 0.0
    u = ranks / max(n_ids - 1, 1)
    per_source = np.bincount(where, weights=u, minlength=len(groups)) / np.bincount(where, minlength=len(groups))  # (clusters,)
    m = float(per_source.mean())
    se = float(per_source.std(ddof=1) / np.sqrt(len(per_source))) if len(per_source) > 1 else float("nan")
    # Student's t over the G source means: with z = 1.96 the interval missed 0.5 in 7 % of null audits
    # at the demo's 24 sources (tests/attacks/linkability/test_ranks.py checks its coverage).
    half = float(student_t.ppf(0.975, len(per_source) - 1)) * se if len(per_source) > 1 else float("nan")
    return UniformityTest(statistic=t, p=float(p), p_floor=1.0 / (1 + permutations), data_floor=data_floor,
                          permutations=int(permutations), bins=b, histogram=np.histogram(ranks, bins=edges)[0].tolist(),
                          expected=expected.tolist(), mean_rank=m, mean_rank_ci95=[m - half, m + half],
                          chance_mean_rank=0.5, uniform=bool(p > 0.05))


def source_rank_test(proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any, *,
                     permutations: int = 2000, seed: int = 0, by: str = "cos") -> SourceRankTest:
    """The rank-last attack and the uniformity test of the source's rank, JSON-ready.

    Args:
        by: ``"cos"`` (rank-last names the farthest identity) or ``"abs"`` (ranks by ``|cos|``;
            rank-last is the orthogonal Re-ID).

    Returns:
        The :class:`SourceRankTest`: ``by``, the rank-last attack's figures, the uniformity test.
    """
    src = np.asarray(proxy_source).ravel()
    lab = np.asarray(private_labels).ravel()
    _check_sources(src, lab, len(proxy_emb))
    if by not in RANKINGS:
        raise ValueError(f"by must be one of {RANKINGS}, got {by!r}")
    templates, uniq = identity_templates(private_emb, lab)
    idx = np.empty(len(src), dtype=np.int64)

    def blocks() -> Iterator[tuple[int, np.ndarray]]:  # one pass: the test reads each block, rank-last its last column
        for lo, r, _ in rank_blocks(proxy_emb, templates, by=by):
            idx[lo : lo + len(r)] = r.argmax(1)  # the identity at rank N - 1
            yield lo, r

    test = uniformity_test(None, src, len(uniq), permutations=permutations, seed=seed, rank_matrix=blocks(),
                           identities=uniq)
    last = _last(proxy_emb, src, templates, uniq, idx, by)
    return SourceRankTest(by=by, reid_last=last.as_dict(), **test)
