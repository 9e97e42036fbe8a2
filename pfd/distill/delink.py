"""De-linking against the public model: the source identity at a uniformly random rank.

Not part of the PFD paper. RTA's teacher is fine-tuned from the public model, and where the
public model already knows the private domain it keeps a residual link to pfd's proxies (the
no-shift control of ``python -m benchmarks.privacy_utility`` and the demo: public Re-ID about 2x chance,
while a model that RTA never descended from links them at chance). The publisher holds the same
public model as the outside attacker, so RTA can optimise against it, as Fawkes and LowKey
optimise against a list of extractors.

The target is a *uniform* rank, not the last one: an attacker who ranks the private identities
by similarity to a proxy wins whenever the source sits at a predictable rank, first (nearest) or
last (farthest) alike. And it is one rank per *class*, with the jitter other identities show: a
release's labels group each class's K proxies, which lie close together, so every other identity
holds about the same rank across them; a source given K independent ranks would be the identity
whose rank varies most across its class, and one pinned at a single exact rank the identity whose
rank varies least (both class-level attacks of :mod:`pfd.attacks.linkability.classes`). So each
class ``c`` gets a rank ``r_c`` (:func:`target_ranks`: a permutation of the N identities, so each
rank is the target of exactly ``K`` proxies and top-1 is at exactly chance, ``1/N``), each proxy
``i`` a standard normal draw ``z_i`` (:func:`rank_jitter`), and

.. math::
    L_{dl} = \\frac{1}{B} \\sum_i \\sum_{a \\in \\{\\text{Re-ID}, \\text{VisMatch}\\}}
             (s^a_{i, y_i} - \\tau^a_i)^2,

where ``s^a_{i, c}`` is attack ``a``'s score of identity ``c`` for proxy ``i`` in the public model
(Re-ID: cosine to the identity's template; VisMatch: the largest cosine to one of its images) and
``τ^a_i`` (no gradient) the middle of the gap between the ``ρ_i``-th and ``(ρ_i+1)``-th largest
score of the *other* identities, the value that puts the source at rank ``ρ_i``. The proxy's rank
``ρ_i`` is the class rank moved by the jitter in *rank* units, reflected at the ends
(:func:`jittered_rank`): ``ρ_i = reflect(r_c + z_i σ_c)``, where ``σ_c`` is the spread other
identities' ranks show across the proxies of the class in the batch (:func:`rank_spread`). The
source then moves across its class as another identity does, and every proxy's rank stays uniform:
a jitter in *score* units (the design of 2026-12-04) put every draw beyond the best or worst other
identity on the first or last rank, which an attacker's top-1 and rank-last then found (the
72-person CelebA screen with the de-linking term: public VisMatch 13 %, chance 1.4 %).

The same term in the adapted model's own space (``rta.lambda_insider``, :class:`PublicView` over
the adapted model's private gallery; it reads the embeddings eq. 9 computes anyway) puts the
source at the same uniform rank for the *insider*: without it OGP's eq. 3 leaves each source the
identity most orthogonal to its proxies, which an insider who ranks by ``|cos|`` finds.

Because the loss sees the public model, the public model's gate checks measure the loss's own
target; the gate then needs a judge that no loss sees (``release.judge``, :mod:`pfd.distill.gate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PublicView", "rank_target", "rank_spread", "jittered_rank", "identity_scores", "delink_loss", "target_ranks", "rank_jitter"]

#: How far above the best (below the worst) other score the extreme ranks aim, in cosine.
EDGE_GAP = 0.05


def _other_ranks(scores: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` each identity's rank (0 = the highest score) among the row's *other* identities (the source's column: N-1)."""
    s = scores.detach().clone()
    s[torch.arange(s.shape[0]), source] = float("-inf")  # the source never counts above another identity
    return s.argsort(dim=1, descending=True).argsort(dim=1)  # (B, N): the source is last, the others 0..N-2


def rank_spread(scores: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """How much other identities' *ranks* vary across the proxies of each row's class (detached).

    For each class (the rows sharing a source) the standard deviation over its rows of each other
    identity's rank among the other identities, and their median over the other identities. A
    class with a single row in the batch takes the median over the batch's other classes (0 if
    none has two rows).

    Args:
        scores: ``(B, N)`` identity scores.
        source: ``(B,)`` the source identity of each row (its class).

    Returns:
        ``(B,)`` float spread, in ranks, of each row's class.
    """
    ranks = _other_ranks(scores, source).to(torch.float64)  # (B, N)
    out = torch.full((ranks.shape[0],), float("nan"), dtype=torch.float64, device=ranks.device)
    for c in torch.unique(source):
        rows = source == c
        if int(rows.sum()) < 2:
            continue
        keep = torch.ones(ranks.shape[1], dtype=torch.bool, device=ranks.device)
        keep[c] = False
        out[rows] = ranks[rows][:, keep].std(0).median()
    known = out[~torch.isnan(out)]
    fill = known.median() if known.numel() else ranks.new_zeros(())
    return torch.where(torch.isnan(out), fill, out)


def jittered_rank(rank: torch.Tensor, jitter: torch.Tensor, spread: torch.Tensor, n_ids: int) -> torch.Tensor:
    """``r + z σ`` reflected into the ``N`` ranks, rounded: a uniform rank stays uniform.

    Reflection at ``-1/2`` and ``N - 1/2`` keeps the uniform distribution of the class ranks
    uniform per proxy (a symmetric step from a uniform start, reflected, is uniform); a jitter
    added to the *score* instead lets every draw beyond the best or worst other identity land on
    the first or last rank, which then hold far more than ``1/N`` of the proxies.

    Args:
        rank: ``(B,)`` class ranks in ``[0, N)``.
        jitter: ``(B,)`` standard normal draws.
        spread: ``(B,)`` the class's :func:`rank_spread`, in ranks.
        n_ids: N.

    Returns:
        ``(B,)`` int64 ranks in ``[0, N)``.
    """
    x = rank.to(torch.float64) + jitter.to(torch.float64) * spread.to(torch.float64) + 0.5
    y = torch.remainder(x, 2.0 * n_ids)
    y = torch.where(y > n_ids, 2.0 * n_ids - y, y)  # (B,) in [0, N]
    return (y - 0.5).round().clamp(0, n_ids - 1).to(torch.int64)


def rank_target(scores: torch.Tensor, source: torch.Tensor, rank: torch.Tensor,
                jitter: torch.Tensor | None = None) -> torch.Tensor:
    """The score that puts each row's source identity at ``rank`` among all ``N`` identities, jittered.

    Args:
        scores: ``(B, N)`` identity scores (higher = more similar).
        source: ``(B,)`` the source identity of each row.
        rank: ``(B,)`` target rank in ``[0, N)``; 0 = first (the highest score).
        jitter: ``(B,)`` standard normal draws (:func:`rank_jitter`), or ``None`` for the exact rank.

    Returns:
        ``(B,)`` the midpoint of the gap between the other identities' ``r``-th and ``(r+1)``-th
        highest scores (:data:`EDGE_GAP` beyond the extremes), where ``r`` is ``rank`` or, with
        ``jitter``, :func:`jittered_rank` with the class's :func:`rank_spread`; detached.
    """
    b, n = scores.shape
    s = scores.detach()
    keep = torch.ones_like(s, dtype=torch.bool)
    keep[torch.arange(b), source] = False
    others = s[keep].view(b, n - 1).sort(dim=1, descending=True).values  # (B, N-1)
    above = torch.cat([others[:, :1] + EDGE_GAP, others], dim=1)  # (B, N): the score just above rank r
    below = torch.cat([others, others[:, -1:] - EDGE_GAP], dim=1)  # (B, N): the score just below it
    if jitter is not None:
        rank = jittered_rank(rank, jitter.to(s.device), rank_spread(s, source), n)
    r = rank.view(-1, 1).to(s.device)
    return 0.5 * (above.gather(1, r) + below.gather(1, r)).squeeze(1)


def identity_scores(emb: torch.Tensor, gallery: torch.Tensor, gallery_id: torch.Tensor, n_ids: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-ID and VisMatch identity scores of normalised embeddings against a private gallery.

    Args:
        emb: ``(B, D)`` normalised proxy embeddings.
        gallery: ``(m, D)`` normalised private embeddings (the same model).
        gallery_id: ``(m,)`` identity of each gallery row in ``[0, n_ids)``.
        n_ids: N.

    Returns:
        ``(reid (B, N), vismatch (B, N))``: cosine to each identity's template
        ``norm(Σ e)`` (:func:`pfd.attacks.linkability.matching.rank1_reid`), and the largest
        cosine to one of its images (:func:`~pfd.attacks.linkability.matching.visual_matching`).
    """
    templates = torch.zeros(n_ids, gallery.shape[1], dtype=gallery.dtype, device=gallery.device)
    templates.index_add_(0, gallery_id, gallery)
    templates = templates / templates.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (N, D)
    reid = emb @ templates.T  # (B, N)
    sims = emb @ gallery.T  # (B, m)
    idx = gallery_id.view(1, -1).expand_as(sims)
    vis = sims.new_full((emb.shape[0], n_ids), -2.0).scatter_reduce(1, idx, sims, reduce="amax")  # (B, N)
    return reid, vis


def delink_loss(scores: tuple[torch.Tensor, ...], source: torch.Tensor, rank: torch.Tensor,
                jitter: torch.Tensor | None = None) -> torch.Tensor:
    """``L_dl``: squared distance of each source score to its rank target, summed over attacks, mean over rows.

    Args:
        scores: One ``(B, N)`` score matrix per attack (:func:`identity_scores`).
        source: ``(B,)`` source identities.
        rank: ``(B,)`` target ranks.
        jitter: ``(B,)`` the rows' jitter draws (:func:`rank_target`), or ``None``.

    Returns:
        Scalar tensor.
    """
    rows = torch.arange(source.shape[0], device=source.device)
    total = scores[0].new_zeros(())
    for s in scores:
        total = total + ((s[rows, source] - rank_target(s, source, rank, jitter)) ** 2).mean()
    return total


def target_ranks(rows: np.ndarray | torch.Tensor, n_ids: int, k: int, *, seed: int) -> torch.Tensor:
    """Target rank of each prototype row: one rank per class, each rank exactly ``K`` times over the release.

    Row ``r`` is proxy ``r mod K`` of identity ``c = r // K`` (P is identity-major, eq. 8). A
    permutation ``π`` of the ``N`` identities, drawn from ``seed``, gives every proxy of identity
    ``c`` the rank ``π(c)``: each rank is the target of exactly ``K`` proxies (top-1 at exactly
    chance, ``1/N``), and a class's proxies share their source's rank as they share every other
    identity's (:func:`rank_jitter` adds the variation). A pure function of ``(seed, row)``, so
    batches stay independent and resumable, and the paper's noise and augmentation draws are untouched.

    Args:
        rows: ``(B,)`` prototype rows.
        n_ids: N.
        k: Proxies per identity K.
        seed: The RTA seed.

    Returns:
        ``(B,)`` int64 ranks in ``[0, N)``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    perm = np.random.default_rng(np.random.SeedSequence([int(seed), 1])).permutation(n_ids)
    return torch.from_numpy(perm[rows // k].astype(np.int64))


def rank_jitter(rows: np.ndarray | torch.Tensor, n_ids: int, k: int, *, seed: int) -> torch.Tensor:
    """Each prototype row's standard normal jitter draw (:func:`rank_target`), a pure function of ``(seed, row)``.

    Args:
        rows: ``(B,)`` prototype rows; ``n_ids``, ``k``, ``seed`` as in :func:`target_ranks`.

    Returns:
        ``(B,)`` float32 draws.
    """
    rows = np.asarray(rows, dtype=np.int64)
    z = np.random.default_rng(np.random.SeedSequence([int(seed), 2])).standard_normal(int(n_ids) * int(k))
    return torch.from_numpy(z[rows].astype(np.float32))


@dataclass
class PublicView:
    """What the de-linking term needs of the public model: the model and its private gallery.

    Attributes:
        model: The public backbone, frozen in eval mode by :class:`~pfd.distill.rta.ProxyDistiller`.
        gallery: ``(m, D)`` normalised public embeddings of the private images.
        gallery_id: ``(m,)`` their identities in ``[0, n_ids)``.
        n_ids: Number of private identities N.
    """

    model: nn.Module
    gallery: torch.Tensor
    gallery_id: torch.Tensor
    n_ids: int

    def loss(self, x: torch.Tensor, source: torch.Tensor, rank: torch.Tensor,
             jitter: torch.Tensor | None = None) -> torch.Tensor:
        """``L_dl`` of images ``x`` ``(B, 3, H, W)`` whose sources are ``source`` ``(B,)``."""
        return self.loss_of(F.normalize(self.model(x).float(), dim=1), source, rank, jitter)

    def loss_of(self, emb: torch.Tensor, source: torch.Tensor, rank: torch.Tensor,
                jitter: torch.Tensor | None = None) -> torch.Tensor:
        """``L_dl`` of normalised embeddings ``emb`` ``(B, D)`` already computed by this view's model."""
        g = self.gallery.to(emb.device, emb.dtype)
        return delink_loss(identity_scores(emb, g, self.gallery_id.to(emb.device), self.n_ids), source, rank, jitter)
