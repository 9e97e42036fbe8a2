"""Hubness-corrected VisMatch and Re-ID: cross-domain similarity local scaling (CSLS).

Proxies and private photos come from different domains (distilled images against real photos,
or a low-resolution domain against the model's training photos). Between two domains nearest
neighbours concentrate on *hubs*: a few gallery items that are the nearest match of a large
share of all queries. On an own-data benchmark one private person was the public model's nearest
match for 288 of 300 proxies: the plain attacks then name that person for nearly everything, score
its own proxies as hits by construction, and say nothing about the others. A real attacker
removes hubness first; CSLS (Conneau et al. 2018, "Word translation without parallel data",
standard in cross-domain retrieval) is the usual way:

    ``CSLS(q, g) = 2 cos(q, g) − r_Q(g) − r_G(q)``,

``r_Q(g)`` the mean cosine of gallery item ``g`` to its ``k`` nearest queries (a hub's is high),
``r_G(q)`` that of query ``q`` to its ``k`` nearest gallery items. ``r_G(q)`` is the same for every
candidate of one query, so the top-1 match is the ``g`` maximising ``2 cos(q, g) − r_Q(g)``:
that is what :func:`csls_top1` computes, streamed over query and gallery chunks like
:func:`~pfd.attacks.linkability.matching.streamed_top1`. The attacks keep their plain
counterparts' success rule, chance (the gallery's composition) and clustered interval; only the
ranking changes. ``k`` = 10 as in Conneau et al. (fewer when there are fewer queries).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pfd.attacks.linkability.matching import LinkabilityResult, _as_tensor, _check_sources, _result, _unit, block_sizes
from pfd.errors import PfdError

__all__ = ["CSLS_K", "csls_top1", "visual_matching_csls", "rank1_reid_csls"]

#: Neighbours of the CSLS correction (Conneau et al. 2018).
CSLS_K = 10


@torch.no_grad()
def csls_top1(queries: Any, gallery: Any, *, k: int = CSLS_K, chunk: int | None = None,
              query_chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-1 gallery row of every query by CSLS, and its cosine.

    Two streamed passes, so memory is ``query_chunk × chunk`` whatever the sizes: the first keeps
    each gallery item's ``k`` largest cosines to the queries (``r_Q``), merged block by block; the
    second finds each query's best ``2 cos − r_Q``.

    Args:
        queries: ``(q, D)`` embeddings (normalised here).
        gallery: ``(g, D)`` embeddings (normalised here), ``g >= 1``.
        k: Nearest queries in each gallery item's hubness ``r_Q(g)`` (at most ``q``).
        chunk: Gallery rows per block (None: :func:`~pfd.attacks.linkability.matching.block_sizes`).
        query_chunk: Query rows per block (likewise).

    Returns:
        ``(index (q,) int64, cosine (q,))``: the CSLS match and its plain cosine; ties go to the
        lowest gallery index.

    Raises:
        PfdError: For mismatched dimensions, an empty gallery or non-finite values.
    """
    q, g = _as_tensor(queries, "queries"), _as_tensor(gallery, "gallery embeddings")
    # In the inputs' precision, as the plain attacks (float64 doubled the cost at 10^4 identities).
    dtype = torch.promote_types(q.dtype, g.dtype)
    q, g = _unit(q.to(dtype)), _unit(g.to(dtype))
    if q.shape[1] != g.shape[1]:
        raise PfdError(f"queries have D={q.shape[1]} but the gallery D={g.shape[1]}; embed both with the same model")
    if g.shape[0] == 0:
        raise PfdError("the gallery is empty; pass at least one private image")
    query_chunk, chunk = block_sizes(q.device, query_chunk, chunk)
    kk = max(1, min(int(k), q.shape[0]))
    r = torch.empty(g.shape[0], dtype=dtype)  # (g,) r_Q: mean cosine to the k nearest queries
    for lo in range(0, g.shape[0], chunk):
        gb = g[lo : lo + chunk]
        top = None  # (c, ≤k) the block's largest cosines so far, over the query blocks seen
        for qlo in range(0, q.shape[0], query_chunk):
            s = gb @ q[qlo : qlo + query_chunk].T  # (c, b): each gallery item's cosines along a row (topk runs
            s = s if top is None else torch.cat([top, s], dim=1)  # on contiguous rows, 3x faster than down columns)
            top = s.topk(min(kk, s.shape[1]), dim=1).values
        r[lo : lo + gb.shape[0]] = top.mean(1)
    best = torch.full((q.shape[0],), -torch.inf, dtype=dtype)
    idx = torch.zeros(q.shape[0], dtype=torch.int64)
    cos = torch.zeros(q.shape[0], dtype=dtype)
    for qlo in range(0, q.shape[0], query_chunk):
        qb, rows = q[qlo : qlo + query_chunk], slice(qlo, qlo + query_chunk)
        for lo in range(0, g.shape[0], chunk):
            s = qb @ g[lo : lo + chunk].T  # (b, c) cosines
            v, i = torch.mul(s, 2.0).sub_(r[None, lo : lo + chunk]).max(dim=1)  # (b,) the block's best CSLS score (first maximum)
            better = v > best[rows]  # strict: an earlier block keeps a tie
            best[rows] = torch.where(better, v, best[rows])
            idx[rows] = torch.where(better, i + lo, idx[rows])
            cos[rows] = torch.where(better, s.gather(1, i[:, None]).squeeze(1), cos[rows])
    return idx.numpy(), cos.numpy()


def visual_matching_csls(proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any, *,
                         k: int = CSLS_K) -> LinkabilityResult:
    """VisMatch with the CSLS ranking: each proxy's CSLS-nearest private image.

    Args:
        proxy_emb: ``(q, D)`` proxy embeddings.
        proxy_source: ``(q,)`` source identity of each proxy (scoring only).
        private_emb: ``(g, D)`` private image embeddings.
        private_labels: ``(g,)`` their identities.
        k: CSLS neighbours.

    Returns:
        A :class:`~pfd.attacks.linkability.matching.LinkabilityResult` with ``attack="vismatch_csls"``.

    Raises:
        PfdError: As :func:`~pfd.attacks.linkability.matching.visual_matching`.
    """
    src, lab = np.asarray(proxy_source).ravel(), np.asarray(private_labels).ravel()
    if lab.shape[0] != len(private_emb):
        raise PfdError(f"{len(private_emb)} private embeddings but {lab.shape[0]} labels; pass one per image")
    _check_sources(src, lab, len(proxy_emb))
    idx, score = csls_top1(proxy_emb, private_emb, k=k)
    return _result("vismatch_csls", lab[idx], src, idx, score, lab)


def rank1_reid_csls(proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any, *,
                    k: int = CSLS_K) -> LinkabilityResult:
    """Rank-1 Re-ID with the CSLS ranking over the identity templates ``norm(Σ e)``.

    Args:
        proxy_emb: ``(q, D)`` proxy embeddings.
        proxy_source: ``(q,)`` source identity of each proxy (scoring only).
        private_emb: ``(g, D)`` private image embeddings (normalised before averaging).
        private_labels: ``(g,)`` their identities.
        k: CSLS neighbours.

    Returns:
        A :class:`~pfd.attacks.linkability.matching.LinkabilityResult` with ``attack="reid_csls"``;
        ``match_index`` indexes ``np.unique(private_labels)``.

    Raises:
        PfdError: As :func:`~pfd.attacks.linkability.matching.rank1_reid`.
    """
    src, lab = np.asarray(proxy_source).ravel(), np.asarray(private_labels).ravel()
    e = _unit(_as_tensor(private_emb, "private embeddings").to(torch.float64))
    if lab.shape[0] != e.shape[0]:
        raise PfdError(f"{e.shape[0]} private embeddings but {lab.shape[0]} labels; pass one per image")
    _check_sources(src, lab, len(proxy_emb))
    uniq, inv = np.unique(lab, return_inverse=True)
    templates = torch.zeros(len(uniq), e.shape[1], dtype=e.dtype).index_add_(0, torch.as_tensor(inv), e)  # (C, D)
    idx, score = csls_top1(proxy_emb, templates, k=k)
    return _result("reid_csls", uniq[idx], src, idx, score, uniq)
