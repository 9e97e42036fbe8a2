"""Characteristic-function matching, the ``ncfm`` baseline (Wang et al., CVPR 2025, "Dataset
distillation with neural characteristic function: a minmax perspective"; Table 1 of the PFD paper).

NCFM matches the distribution of the proxies' features to the real images' features of the same
class through their empirical characteristic functions ``φ(t) = E[exp(i tᵀ x)]``, compared at
frequencies ``t`` that a small sampling network chooses to make the two differ most (min-max):

* the discrepancy at one frequency, NCFM's NCFD with amplitude weight α and phase weight β,
  ``d(t) = sqrt(α (|φ_r| − |φ_s|)² + β · 2 (|φ_r| |φ_s| − Re φ_r Re φ_s − Im φ_r Im φ_s))``,
  averaged over the frequencies -> :func:`cf_discrepancy` (α = β = 1 gives ``|φ_r − φ_s|``);
* the sampling network: three ``Linear + BatchNorm1d`` layers (LeakyReLU 0.2, LeakyReLU, Tanh)
  on Gaussian noise, trained by gradient *ascent* on the same loss -> :class:`FrequencySampler`;
* the proxies' loss: ``λ_cf · mean over the batch's classes of d`` (NCFM weights it 300) plus the
  calibration cross-entropy of the fine-tuned head (NCFM's ``calib_weight`` 1), no BatchNorm term.

What pfd keeps and changes, so that the row is a fair privacy baseline:

* features are the L2-normalised embeddings of the fine-tuned model (``rta-only``'s N-class
  fine-tune, M = I), the real side the private images' un-augmented embeddings (computed once for
  the prototypes), the proxy side those of the augmented proxies;
* proxies start from the same noise (or public faces) as every distilled method: NCFM initialises
  from real images of the class, which a release of private faces cannot do (its proxies would be
  edited private photos);
* one sampler per proxy batch, seeded from ``(seed, batch_index)``, so batches stay independent and
  resumable bit for bit like RTA's.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pfd.errors import PfdError
from pfd.nn.inversion import batch_generator

__all__ = ["cf_discrepancy", "FrequencySampler", "CFTarget", "CFBatch", "NCFM_ALPHA", "NCFM_BETA", "NCFM_REPEAT"]

#: NCFM's amplitude and phase weights (its configs' ``alpha_for_loss`` and ``beta_for_loss``).
NCFM_ALPHA = 0.5
NCFM_BETA = 0.5
#: NCFM's sampler draws one noise row per 16 frequencies and repeats its output 16 times; repeated
#: rows do not change the mean over frequencies, so pfd draws the distinct rows only.
NCFM_REPEAT = 16
#: Offset of the samplers' streams from the batches' own (``batch_generator(seed, b)``).
_STREAM = 1_000_003


def _cf(t: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Real and imaginary parts of the empirical characteristic function of ``x`` ``(n, D)`` at ``t`` ``(F, D)``: ``(F,)`` each."""
    tx = t @ x.T  # (F, n)
    return torch.cos(tx).mean(1), torch.sin(tx).mean(1)


def cf_discrepancy(real: torch.Tensor, synth: torch.Tensor, t: torch.Tensor, *, alpha: float = NCFM_ALPHA,
                   beta: float = NCFM_BETA) -> torch.Tensor:
    """NCFM's characteristic-function discrepancy between two feature sets, averaged over frequencies.

    Args:
        real: Features of the real images ``(n_r, D)``.
        synth: Features of the proxies ``(n_s, D)``.
        t: Frequencies ``(F, D)``.
        alpha: Weight of the amplitude difference ``(|φ_r| − |φ_s|)²``.
        beta: Weight of the phase difference ``2 (|φ_r| |φ_s| − Re(φ_r φ̄_s))``.

    Returns:
        Scalar tensor ``mean_t sqrt(α amp(t) + β pha(t))``; with α = β = 1 it is ``mean_t |φ_r(t) − φ_s(t)|``.
    """
    re_r, im_r = _cf(t, real)  # (F,)
    re_s, im_s = _cf(t, synth)  # (F,)
    norm_r = torch.sqrt(re_r * re_r + im_r * im_r)
    norm_s = torch.sqrt(re_s * re_s + im_s * im_s)
    amp = (norm_r - norm_s) ** 2
    # Clamped as NCFM does: the phase term is ≥ 0 in exact arithmetic, and the square root of a
    # rounding error below 0 would be NaN (its gradient at 0 infinite).
    pha = (2 * (norm_r * norm_s - re_r * re_s - im_r * im_s)).clamp(min=1e-12)
    return torch.sqrt(alpha * amp + beta * pha).mean()


class _Reverse(torch.autograd.Function):
    """Identity forward, negated gradient backward: the sampler ascends the loss the proxies descend."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return -grad


class FrequencySampler(nn.Module):
    """NCFM's sampling network: Gaussian noise -> frequencies ``(F, D)`` in ``(-1, 1)``.

    Args:
        dim: Feature dimension D.
        rows: Distinct frequencies per draw.
        generator: The noise's generator (a batch's own, for resumable runs).
    """

    def __init__(self, dim: int, rows: int, generator: torch.Generator) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(3):
            layers += [nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.LeakyReLU(0.2) if i < 2 else nn.Tanh()]
        self.net = nn.Sequential(*layers)
        self.dim, self.rows, self.generator = int(dim), int(rows), generator

    def forward(self) -> torch.Tensor:  # type: ignore[override]
        """One draw of frequencies ``(rows, D)``, each a fresh noise row through the network."""
        z = torch.randn(self.rows, self.dim, generator=self.generator)  # (F, D), variance 1 (NCFM's t_var)
        return self.net(z.to(next(self.parameters()).device))


class CFBatch:
    """The characteristic-function term of one proxy batch, with its own sampler and optimiser.

    Built by :meth:`CFTarget.batch`. Call :meth:`loss` inside the proxies' loss and :meth:`step`
    after every Adam step of the proxies.
    """

    def __init__(self, target: "CFTarget", sources: np.ndarray, generator: torch.Generator) -> None:
        self.target = target
        src = np.asarray(sources, dtype=np.int64)
        self.classes = [int(c) for c in np.unique(src)]
        self.members = [torch.as_tensor(np.flatnonzero(src == c), device=target.device) for c in self.classes]
        self.real = [target.gallery[target.labels == c] for c in self.classes]  # (n_c, D) each
        for c, r in zip(self.classes, self.real):
            if len(r) == 0:
                raise PfdError(f"characteristic-function matching: identity {c} has no private embeddings")
        self.generator = generator
        self.sampler: FrequencySampler | None = None
        self.opt: torch.optim.Optimizer | None = None
        if target.sampler_lr > 0:
            rows = max(1, -(-target.frequencies // NCFM_REPEAT))
            init_seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
            with torch.random.fork_rng(devices=[]):  # the sampler's initial weights, without touching the global RNG
                torch.manual_seed(init_seed)
                self.sampler = FrequencySampler(target.gallery.shape[1], rows, generator).to(target.device)
            self.opt = torch.optim.Adam(self.sampler.parameters(), lr=target.sampler_lr)

    def frequencies(self) -> torch.Tensor:
        """This iteration's frequencies ``(F, D)``: the sampler's (gradient reversed) or ``N(0, I)``."""
        if self.sampler is None:
            return torch.randn(self.target.frequencies, self.target.gallery.shape[1],
                               generator=self.generator).to(self.target.device)
        return _Reverse.apply(self.sampler())

    def loss(self, emb: torch.Tensor) -> torch.Tensor:
        """Mean over the batch's classes of :func:`cf_discrepancy` between the class's private and proxy embeddings.

        Args:
            emb: Normalised proxy embeddings ``(B, D)`` in the order of ``sources``.
        """
        t = self.frequencies()
        parts = [cf_discrepancy(real, emb[idx].float(), t) for real, idx in zip(self.real, self.members)]
        return torch.stack(parts).mean()

    def step(self) -> None:
        """One ascent step of the sampler on the gradient the last backward left (none without a sampler)."""
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)


class CFTarget:
    """The private side of characteristic-function matching: every private embedding and its identity.

    Args:
        gallery: Normalised private embeddings ``(n, D)`` of the model the proxies are distilled against.
        labels: Their identities ``(n,)`` in ``[0, N)``.
        frequencies: Frequencies per iteration (NCFM's ``num_freqs``, 4096).
        sampler_lr: Adam learning rate of the sampling network (NCFM's ``lr_sampling_net``, 1e-3);
            0: fresh Gaussian frequencies every iteration (NCFM without its sampler).
        seed: Seed of the samplers (batch ``b`` draws from ``(seed, b)``).
        device: Where the embeddings live.
    """

    def __init__(self, gallery: torch.Tensor, labels: torch.Tensor | np.ndarray, *, frequencies: int = 4096,
                 sampler_lr: float = 1e-3, seed: int = 0, device: torch.device | str = "cpu") -> None:
        if frequencies < 1:
            raise PfdError(f"rta.cf_frequencies = {frequencies}: must be at least 1")
        self.device = torch.device(device)
        self.gallery = F.normalize(gallery.float(), dim=1).to(self.device)  # (n, D)
        self.labels = torch.as_tensor(np.asarray(labels), dtype=torch.int64, device=self.device)  # (n,)
        self.frequencies, self.sampler_lr, self.seed = int(frequencies), float(sampler_lr), int(seed)

    def batch(self, sources: np.ndarray, *, batch_index: int) -> CFBatch:
        """The term of one proxy batch whose proxies come from ``sources`` ``(B,)`` (its draws seeded from the batch)."""
        # Its own stream, apart from the batch's noise and augmentation (which batch_generator(seed, b) drives).
        return CFBatch(self, sources, batch_generator(self.seed, _STREAM + int(batch_index)))
