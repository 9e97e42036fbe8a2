"""Source-identity linkability of released proxies: Visual Matching and Rank-1 Re-ID.

PFD paper, "Source-Identity Linkability" (following the protocol of Cherepanova et al. 2021,
LowKey): an attacker holding a gallery of private images tries to link each released proxy (or
its reconstruction) back to the identity it was distilled from.

* **VisMatch** associates each proxy with its nearest single private image by cosine
  similarity; it succeeds when that image belongs to the proxy's source identity.
* **Rank-1 Re-ID** retrieves the top-1 identity among per-identity templates of the private
  gallery (template ``t_c = Σ_{i∈c} e_i / ‖Σ_{i∈c} e_i‖`` over unit embeddings ``e_i``).

With every one of the ``N`` private identities as a candidate, random assignment succeeds with
probability ``1/N`` when identities are balanced (the paper: 1/150 = 0.67 %). In general chance
comes from the gallery's composition, :func:`~pfd.audit.intervals.composition_chance`:
``Σ_c (share of proxies of c) × (share of gallery rows of c)``, gallery rows being images for
VisMatch and one template per identity for Re-ID. The ``K`` proxies of one source identity share
it and its prototypes, so their successes are clustered: the 95 % interval is the exact binomial
interval at the effective sample size of :func:`~pfd.audit.intervals.clustered_interval`
(cluster = source identity), never narrower than the plain exact interval and up to ``√K`` wider.
The proxy -> source map is used only for scoring.

Nearest neighbours are exact and streamed over gallery chunks (:func:`streamed_top1`), so
memory is ``query_chunk × chunk`` whatever the gallery size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import torch

from pfd.audit.intervals import clustered_interval, composition_chance
from pfd.errors import PfdError

__all__ = ["CPU_BLOCK", "DEVICE_BLOCK", "block_sizes", "streamed_top1", "LinkabilityResult", "LinkabilityFigures", "LinkFigures", "visual_matching", "rank1_reid", "HUB_SHARE", "hub_share"]


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    t = x.detach() if torch.is_tensor(x) else torch.as_tensor(np.asarray(x))
    if t.ndim != 2:
        raise PfdError(f"{name} must be a (n, D) matrix, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        t = t.float()
    if not torch.isfinite(t).all():
        raise PfdError(f"{name} contain NaN or inf; re-run the embedder (check the model and images)")
    return t


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


#: Block of a streamed search on the CPU, ``(queries, gallery rows)``: a 1024 × 1024 score block (4 MiB in
#: float32) stays in cache between the product and the row maximum; an 8192 × 4096 one (128 MiB) went
#: through memory twice and took twice as long (20,000 × 40,000 at D 64, one thread: 3.4 -> 1.6 s).
CPU_BLOCK = (1024, 1024)
#: The block elsewhere (a GPU): large, so that few kernels launch.
DEVICE_BLOCK = (8192, 4096)


def block_sizes(device: torch.device, query_chunk: int | None = None, chunk: int | None = None) -> tuple[int, int]:
    """``(query rows, gallery rows)`` of a streamed search's blocks on ``device``; given values are kept.

    Raises:
        PfdError: A given size below 1.
    """
    default = CPU_BLOCK if torch.device(device).type == "cpu" else DEVICE_BLOCK
    qc = default[0] if query_chunk is None else int(query_chunk)
    gc = default[1] if chunk is None else int(chunk)
    if qc < 1 or gc < 1:
        raise PfdError(f"chunk sizes must be >= 1, got chunk={gc}, query_chunk={qc}")
    return qc, gc


@torch.no_grad()
def streamed_top1(
    queries: Any,
    gallery: Any,
    *,
    chunk: int | None = None,
    query_chunk: int | None = None,
    normalize: bool = True,
    device: str | torch.device | None = None,
    metric: str = "cosine",
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-1 gallery row by cosine similarity (or Euclidean distance) for every query, streamed.

    For each block of ``query_chunk`` queries, the gallery is visited ``chunk`` rows at a time:
    ``S = Q Gᵀ`` (``(q, chunk)``), and the running best is replaced only by a *strictly* larger
    score, so ties go to the lowest gallery index (as ``argmax`` of the full matrix).

    Args:
        queries: ``(q, D)`` query embeddings (numpy or torch).
        gallery: ``(g, D)`` gallery embeddings, ``g >= 1``.
        chunk: Gallery rows per block (None: the device's, :func:`block_sizes`).
        query_chunk: Query rows per block (None: likewise).
        normalize: L2-normalise both sides first (cosine); False for already-unit inputs.
        device: Where to compute (default: the queries' device). Results come back on CPU.
        metric: ``"cosine"``, or ``"euclidean"``: nearest by ``‖q − g‖`` on the raw rows (no
            normalisation), ranked by ``2 q·g − ‖g‖²`` so that the same streaming applies.

    Returns:
        ``(index (q,) int64, score (q,) float)``: nearest gallery row and its cosine (for
        Euclidean: minus the distance, so that higher is still closer).

    Raises:
        PfdError: For mismatched dimensions, an empty gallery, non-finite values or chunk < 1.
    """
    q, g = _as_tensor(queries, "queries"), _as_tensor(gallery, "gallery embeddings")
    if q.shape[1] != g.shape[1]:
        raise PfdError(f"queries have D={q.shape[1]} but the gallery D={g.shape[1]}; embed both with the same model")
    if g.shape[0] == 0:
        raise PfdError("the gallery is empty; pass at least one private image")
    if metric not in ("cosine", "euclidean"):
        raise PfdError(f"metric must be 'cosine' or 'euclidean', got {metric!r}")
    euclid = metric == "euclidean"
    normalize = normalize and not euclid
    dev = torch.device(device) if device is not None else q.device
    query_chunk, chunk = block_sizes(dev, query_chunk, chunk)
    dtype = torch.promote_types(q.dtype, g.dtype)
    best_idx = torch.zeros(q.shape[0], dtype=torch.int64)
    best_val = torch.empty(q.shape[0], dtype=dtype)
    for qlo in range(0, q.shape[0], query_chunk):
        qb = q[qlo : qlo + query_chunk].to(dev, dtype)  # (b, D)
        qb = _unit(qb) if normalize else qb
        val = torch.full((qb.shape[0],), -torch.inf, dtype=dtype, device=dev)
        idx = torch.zeros(qb.shape[0], dtype=torch.int64, device=dev)
        for glo in range(0, g.shape[0], chunk):
            gb = g[glo : glo + chunk].to(dev, dtype)  # (c, D)
            s = qb @ (_unit(gb) if normalize else gb).T  # (b, c)
            if euclid:  # −‖q−g‖² + ‖q‖²: the same order as −distance for each query
                s = 2 * s - (gb * gb).sum(1)[None, :]
            v, i = s.max(dim=1)  # first maximum within the block
            better = v > val  # strict: an earlier block keeps a tie
            val = torch.where(better, v, val)
            idx = torch.where(better, i + glo, idx)
        if euclid:
            val = -((qb * qb).sum(1) - val).clamp_min(0).sqrt()  # minus the distance
        best_val[qlo : qlo + qb.shape[0]] = val.cpu()
        best_idx[qlo : qlo + qb.shape[0]] = idx.cpu()
    return best_idx.numpy(), best_val.numpy()


class _FigureFields(TypedDict):
    attack: str
    count: int
    n: int
    rate: float
    chance: float
    ci95: list[float]
    n_identities: int
    n_eff: float
    design_effect: float
    clusters: int


class LinkabilityFigures(_FigureFields, total=False):
    """A :class:`LinkabilityResult` in ``report.json`` (:meth:`LinkabilityResult.as_dict`): its
    figures, and the per-proxy arrays only when asked for."""

    predicted: list[int]
    match_index: list[int]
    score: list[float]
    success: list[bool]


@dataclass(frozen=True)
class LinkabilityResult:
    """Outcome of a linkability attack.

    Attributes:
        attack: ``"vismatch"`` or ``"reid"``.
        count: Successful links.
        n: Proxies attacked.
        rate: ``count / n``.
        chance: Random assignment's success rate from the gallery's composition
            (:func:`~pfd.audit.intervals.composition_chance`; ``1 / n_identities`` when balanced).
        ci95: 95 % interval of ``rate`` respecting the clustering of proxies by source identity
            (:func:`~pfd.audit.intervals.clustered_interval`).
        n_identities: Candidate identities in the private gallery.
        n_eff: Effective number of independent trials behind ``ci95``.
        design_effect: ``n / n_eff``.
        clusters: Source identities among the proxies.
        predicted: ``(n,)`` predicted source label per proxy.
        match_index: ``(n,)`` nearest private image (VisMatch) or identity (Re-ID, index into
            ``np.unique(private_labels)``), e.g. for a grid of proxies beside their matches.
        score: ``(n,)`` cosine of that match.
        success: ``(n,)`` bool.
    """

    attack: str
    count: int
    n: int
    rate: float
    chance: float
    ci95: tuple[float, float]
    n_identities: int
    n_eff: float
    design_effect: float
    clusters: int
    predicted: np.ndarray = field(repr=False)
    match_index: np.ndarray = field(repr=False)
    score: np.ndarray = field(repr=False)
    success: np.ndarray = field(repr=False)

    def as_dict(self, *, per_proxy: bool = False) -> LinkabilityFigures:
        """JSON-ready figures; the per-proxy arrays only with ``per_proxy=True``."""
        d = LinkabilityFigures(attack=self.attack, count=self.count, n=self.n, rate=self.rate, chance=self.chance,
                               ci95=[float(x) for x in self.ci95], n_identities=self.n_identities, n_eff=self.n_eff,
                               design_effect=self.design_effect, clusters=self.clusters)
        if per_proxy:
            d.update(predicted=self.predicted.tolist(), match_index=self.match_index.tolist(),
                     score=self.score.tolist(), success=self.success.tolist())
        return d


@dataclass
class LinkFigures:
    """One attacker's linkability results on one target (the risk table's
    :class:`~pfd.audit.risk.IdentityLinks`).

    Attributes:
        target: ``"proxies"`` or ``"reconstructions"``.
        attacker: The attacker's role.
        results: Per attack name (``"vismatch"``, ``"reid"``, ``"vismatch_csls"``, ...) its result.
    """

    target: str
    attacker: str
    results: dict[str, LinkabilityResult]

    def as_dict(self) -> dict[str, str | LinkabilityFigures]:
        """``report.json``'s entry: ``{"target", "attacker", <attack>: {...}}``."""
        return {"target": self.target, "attacker": self.attacker, **{a: r.as_dict() for a, r in self.results.items()}}


#: A private identity named for at least this share of all proxies is a hub (its own proxies then link by construction).
HUB_SHARE = 0.25


def hub_share(result: LinkabilityResult) -> tuple[float, bool]:
    """The largest share of proxies an attack named as one identity, and whether that is a hub
    (at least :data:`HUB_SHARE` and twice the identity's fair share ``1 / N``)."""
    pred = np.asarray(result.predicted)
    if pred.size == 0:
        return 0.0, False
    _, named = np.unique(pred, return_counts=True)
    share = float(named.max() / pred.size)
    return share, bool(share >= max(HUB_SHARE, 2.0 / max(result.n_identities, 1)))


def _check_sources(proxy_source: np.ndarray, private_labels: np.ndarray, n_proxies: int) -> None:
    if proxy_source.shape[0] != n_proxies:
        raise PfdError(f"{n_proxies} proxy embeddings but {proxy_source.shape[0]} source labels; pass one per proxy")
    missing = np.setdiff1d(proxy_source, private_labels)
    if missing.size:
        raise PfdError(
            f"proxy source identity {missing[:1].tolist()[0]!r} has no image in the private gallery; "
            "the state dir does not match these private images"
        )


def _result(attack: str, predicted: np.ndarray, source: np.ndarray, index: np.ndarray, score: np.ndarray,
            gallery_rows: np.ndarray) -> LinkabilityResult:
    success = predicted == source
    k, n = int(success.sum()), int(success.size)
    ci = clustered_interval(success, source)
    return LinkabilityResult(
        attack=attack, count=k, n=n, rate=k / n if n else 0.0, chance=composition_chance(source, gallery_rows),
        ci95=ci["ci95"], n_identities=int(np.unique(gallery_rows).size), n_eff=ci["n_eff"],
        design_effect=ci["design_effect"], clusters=ci["clusters"], predicted=predicted, match_index=index,
        score=score, success=success,
    )


def visual_matching(
    proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any, *, chunk: int | None = None,
    metric: str = "cosine"
) -> LinkabilityResult:
    """VisMatch: each proxy's nearest single private image; success if it is of the source identity.

    Args:
        proxy_emb: ``(q, D)`` embeddings of the proxies (or their reconstructions).
        proxy_source: ``(q,)`` source identity label of each proxy (scoring only).
        private_emb: ``(g, D)`` embeddings of the private images.
        private_labels: ``(g,)`` identity labels of the private images.
        chunk: Gallery chunk of :func:`streamed_top1` (None: :func:`block_sizes`).
        metric: ``"cosine"`` or ``"euclidean"`` (the attacker model's own comparison).

    Returns:
        A :class:`LinkabilityResult` with ``attack="vismatch"``.

    Raises:
        PfdError: For mismatched shapes, or a proxy source absent from the private labels.
    """
    src, lab = np.asarray(proxy_source).ravel(), np.asarray(private_labels).ravel()
    if lab.shape[0] != len(private_emb):
        raise PfdError(f"{len(private_emb)} private embeddings but {lab.shape[0]} labels; pass one per image")
    _check_sources(src, lab, len(proxy_emb))
    idx, score = streamed_top1(proxy_emb, private_emb, chunk=chunk, metric=metric)
    return _result("vismatch", lab[idx], src, idx, score, lab)


def rank1_reid(
    proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any, *, chunk: int | None = None,
    metric: str = "cosine"
) -> LinkabilityResult:
    """Rank-1 Re-ID: top-1 identity among templates ``t_c = norm(Σ_{i∈c} e_i)`` of the gallery.

    With ``metric="euclidean"`` the templates are the plain means of the raw embeddings and the
    nearest one is by Euclidean distance (dlib / face-api style).

    Args:
        proxy_emb: ``(q, D)`` proxy embeddings.
        proxy_source: ``(q,)`` source identity label of each proxy (scoring only).
        private_emb: ``(g, D)`` private image embeddings (normalised before averaging).
        private_labels: ``(g,)`` their identity labels.
        chunk: Template chunk of :func:`streamed_top1` (None: :func:`block_sizes`).
        metric: ``"cosine"`` or ``"euclidean"``.

    Returns:
        A :class:`LinkabilityResult` with ``attack="reid"``; ``match_index`` indexes
        ``np.unique(private_labels)``.

    Raises:
        PfdError: As :func:`visual_matching`.
    """
    src, lab = np.asarray(proxy_source).ravel(), np.asarray(private_labels).ravel()
    e = _as_tensor(private_emb, "private embeddings").to(torch.float64)
    e = e if metric == "euclidean" else _unit(e)
    if lab.shape[0] != e.shape[0]:
        raise PfdError(f"{e.shape[0]} private embeddings but {lab.shape[0]} labels; pass one per image")
    _check_sources(src, lab, len(proxy_emb))
    uniq, inv = np.unique(lab, return_inverse=True)
    templates = torch.zeros(len(uniq), e.shape[1], dtype=e.dtype).index_add_(0, torch.as_tensor(inv), e)  # (C, D)
    if metric == "euclidean":  # the mean itself; for cosine the sum's direction is the template
        templates = templates / torch.as_tensor(np.bincount(inv), dtype=e.dtype)[:, None]
    q = _as_tensor(proxy_emb, "proxy embeddings")
    idx, score = streamed_top1(q, templates.to(q.dtype), chunk=chunk, metric=metric)
    return _result("reid", uniq[idx], src, idx, score, uniq)
