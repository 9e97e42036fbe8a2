"""BatchNorm statistics matching, eq. 6 of the PFD paper (the SRe2L "recover" prior).

``L_bn = Σ_l (‖μ_l(s) − BN_l^RM‖₂ + ‖σ²_l(s) − BN_l^RV‖₂)``: the batch mean and variance of the
*input* of every BatchNorm layer l, computed on the batch of synthetic images s in the same
forward pass as the other losses (no second pass), pulled towards the layer's running statistics.
Used by RTA (eq. 10) and by the reconstruction attack.

Facts carried over from SRe2L's ``BNFeatureHook`` (Yin et al. 2023, ``recover/utils.py``):
the statistics are those of the layer input over (N, H, W), the variance is the biased one
(``unbiased=False``), both distances are plain L2 norms (not squared), and the first hooked layer
(in ``model.modules()`` order; ``bn1`` of an IResNet) is multiplied by ``first_bn_multiplier``
(10 in SRe2L).

Which layers: only ``BatchNorm2d`` by default, as SRe2L. IResNet also ends with a
``BatchNorm1d`` on the embedding (``features``); its batch statistics are those of a batch of
*embeddings*, which RTA deliberately drives towards a few specific class prototypes (eq. 7, 9).
A batch covering a handful of proxy classes legitimately has an embedding mean far from the
population running mean, so matching it would fight L_RTA and L_cls (and with B ≈ 100 samples in
512 dimensions the per-dimension variance estimate is noisy). ``include_bn1d=True`` adds such
layers (statistics over every dimension but the channel one) for experiments.

How it is computed (the cost is the point: L_bn runs at every RTA iteration). While a
:class:`BNStatistics` is active, each hooked layer's ``forward`` is replaced (an instance
attribute, removed again by :meth:`BNStatistics.remove`) by one autograd node that makes the
layer's own eval-mode :func:`torch.batch_norm` call and, from the same input, the per-channel
``Σx`` and ``Σx²`` (two read-only passes; float64 across rows). Its backward adds the analytic
moment gradient to the normalisation's own: ``∂L/∂x = g_y·w/√(RV+ε) + a·x + c`` in one multiply
and two fused in-place passes, instead of a second node whose gradient autograd must then add.
The per-layer distances are one batched reduction over all layers (``index_add`` of squared
differences, one square root), not two norms per layer. A layer in training mode keeps its own
forward and gets :func:`batch_moments` instead. Moments from raw sums lose about
``1e-7·(1 + μ²/σ²)`` of σ² to cancellation in float32 (1e-5 at a mean ten standard deviations
from zero), far below what L_bn resolves.

The model is expected in eval mode: BN then normalises with its running statistics and does not
update them, so the statistics are read-only. The model's buffers and outputs are unchanged.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch
from torch import nn

from pfd.errors import PfdError

__all__ = ["BNStatistics", "batch_moments", "bn_input_moments", "Targets"]

#: Per hooked BatchNorm layer, the ``(mean (C,), biased var (C,))`` its input is matched to.
Targets = Sequence[tuple[torch.Tensor, torch.Tensor]]


class _Moments(torch.autograd.Function):
    """Batch mean and biased variance per channel with a one-op analytic backward.

    Forward: one pass for ``Σd`` and one for ``‖d‖²`` over ``d = x − shift``. Backward:
    ``∂L/∂x = g_μ/n + 2 g_σ² (x − μ)/n`` per channel, a single fused multiply-add over x, where
    autograd through ``var`` would materialise ``x − μ``, its square and their gradients.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        dims = [0] + list(range(2, x.ndim))
        view = (1, -1) + (1,) * (x.ndim - 2)
        n = x.numel() // x.shape[1]
        d = x - shift.view(view)
        m1 = d.sum(dim=dims) / n  # (C,) E[d]
        if x.ndim > 2 and d.is_contiguous():
            # NCHW: norms of the contiguous rows of each (n, c), then a sum over N; on a CPU about 6x
            # faster than one norm over the strided (N, H, W) dimensions. (channels_last keeps the
            # plain reduction: flatten would copy.)
            m2 = torch.linalg.vector_norm(d.flatten(2), 2, dim=2).square().sum(0) / n  # (C,) E[d²]
        else:
            m2 = torch.linalg.vector_norm(d, 2, dim=dims).square() / n  # (C,) E[d²]
        mean = m1 + shift
        ctx.save_for_backward(x, mean)
        ctx.n, ctx.view = n, view
        return mean, (m2 - m1 * m1).clamp_min(0.0)

    @staticmethod
    def backward(ctx: Any, g_mean: torch.Tensor | None, g_var: torch.Tensor | None) -> tuple[torch.Tensor, None]:  # noqa: D102
        x, mean = ctx.saved_tensors
        g_mean = torch.zeros_like(mean) if g_mean is None else g_mean
        g_var = torch.zeros_like(mean) if g_var is None else g_var
        a = 2.0 * g_var / ctx.n  # (C,)
        b = g_mean / ctx.n - a * mean  # (C,)
        return torch.addcmul(b.view(ctx.view), x, a.view(ctx.view)), None


def batch_moments(x: torch.Tensor, *, shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel batch mean and biased variance of a BN input, in float32, differentiable.

    Computed from the first two moments of ``d = x − shift`` with an analytic backward
    (:class:`_Moments`): autograd through ``torch.var`` over the (N, H, W) dimensions of an NCHW
    tensor made the statistics a fifth of an RTA iteration on a CPU. Shifting by a value near the
    mean (the layer's running mean) keeps ``E[d²] − E[d]²`` free of cancellation.

    Args:
        x: ``(N, C, H, W)``, ``(N, C, L)`` or ``(N, C)``.
        shift: Per-channel value ``(C,)`` subtracted first (``None``: 0).

    Returns:
        ``(mean (C,), var (C,))`` over every dimension except the channel one.
    """
    x = x.float()
    shift = torch.zeros(x.shape[1], device=x.device) if shift is None else shift.detach().float()
    return _Moments.apply(x, shift)


def _channel_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel ``Σx`` and ``Σx²`` of ``x`` over every dimension but 1, float64 ``(C,)``, no graph.

    NCHW: sums over the contiguous rows of each (n, c) (on a CPU several times faster than one
    reduction over the strided (N, H, W) dimensions), then over N in float64. channels_last: the
    channel is the last, contiguous dimension, so the view ``(N·H·W, C)`` costs no copy.
    """
    acc = torch.float64 if x.device.type in ("cpu", "cuda") else torch.float32
    row = torch.float64 if x.dtype == torch.float64 else torch.float32  # bf16/fp16 inputs are summed in fp32
    if x.ndim > 2 and x.is_contiguous():
        rows = x.flatten(2)  # (N, C, H·W)
        s1 = rows.sum(2, dtype=row)  # (N, C)
        s2 = torch.linalg.vector_norm(rows, 2, dim=2, dtype=row).square_()  # (N, C)
        return s1.sum(0, dtype=acc), s2.sum(0, dtype=acc)
    if x.ndim == 4 and x.is_contiguous(memory_format=torch.channels_last):
        x = x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])  # (N·H·W, C), a view
    elif x.ndim > 2:
        x = x.transpose(0, 1).reshape(x.shape[1], -1).T  # (N·L, C) (a copy for odd layouts)
    return x.sum(0, dtype=acc), torch.linalg.vector_norm(x, 2, dim=0, dtype=acc).square_()


class _EvalBNWithSums(torch.autograd.Function):
    """Eval-mode BatchNorm of ``x`` and the per-channel sums ``S₁ = Σx``, ``S₂ = Σx²``, one node.

    Forward: ``y = (x − RM)/√(RV + ε)·w + b`` (the layer's own :func:`torch.batch_norm` call, bit
    for bit) plus two read-only passes over ``x``. Backward: ``∂L/∂x = g_y·s + 2 g_{S₂}·x + g_{S₁}``
    per channel with ``s = w/√(RV + ε)``: the multiply eval BN's own backward makes, then two fused
    in-place passes, where a separate moment node would add its own gradient tensor and autograd
    one more pass to sum the two. The mean and variance are formed from the sums of all layers at
    once in :meth:`BNStatistics.loss`.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor, weight: torch.Tensor | None,  # noqa: D102
                bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = torch.batch_norm(x, weight, bias, rm, rv, False, 0.0, eps, torch.backends.cudnn.enabled)
        s1, s2 = _channel_sums(x)
        ctx.save_for_backward(x, rm, rv, weight)
        ctx.eps = eps
        ctx.param_dtype = weight.dtype if weight is not None else (bias.dtype if bias is not None else torch.float32)
        return y, s1, s2

    @staticmethod
    def backward(ctx: Any, g_y: torch.Tensor | None, g_s1: torch.Tensor | None, g_s2: torch.Tensor | None):  # noqa: D102
        x, rm, rv, weight = ctx.saved_tensors
        view = (1, -1) + (1,) * (x.ndim - 2)
        invstd = torch.rsqrt(rv.float() + ctx.eps)  # (C,)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            scale = invstd * weight.float() if weight is not None else invstd
            gx = g_y * scale.to(g_y.dtype).view(view) if g_y is not None else torch.zeros_like(x)  # (N, C, ...)
            if g_s2 is not None:
                gx.addcmul_(x, (2.0 * g_s2).to(gx.dtype).view(view))
            if g_s1 is not None:
                gx.add_(g_s1.to(gx.dtype).view(view))
        if g_y is not None and (ctx.needs_input_grad[3] or ctx.needs_input_grad[4]):
            dims = [0] + list(range(2, x.ndim))
            sum_g = g_y.float().sum(dims)  # (C,)
            if ctx.needs_input_grad[3]:  # Σ g·(x − RM)/√(RV + ε)
                gw = (invstd * ((g_y * x).float().sum(dims) - rm.float() * sum_g)).to(ctx.param_dtype)
            if ctx.needs_input_grad[4]:
                gb = sum_g.to(ctx.param_dtype)
        return gx, None, None, gw, gb, None


class BNStatistics:
    """Same-pass BatchNorm statistics of a model and L_bn (eq. 6) computed from them.

    Use as a context manager (or call :meth:`remove`). While active, every hooked layer records
    the batch moments of its input at each forward pass (see the module docstring for how);
    :meth:`loss` returns the weighted sum over the hooked layers for the last pass. A second
    forward pass before :meth:`loss` replaces the statistics of the first. Outputs, gradients to
    the input and buffers of the model are those it has without the hooks.

    Args:
        model: The network (usually frozen, in eval mode; DDP-wrapped modules work too).
        first_multiplier: Weight of the first hooked layer (SRe2L: 10); all others weigh 1.
        include_bn1d: Also hook ``BatchNorm1d`` layers (see the module docstring; default off).

    Raises:
        PfdError: If the model has no BatchNorm layer with running statistics to match.

    Example:
        >>> with BNStatistics(backbone, first_multiplier=10.0) as bn:
        ...     feats = backbone(proxies)          # one forward pass
        ...     loss = ce + lambda_bn * bn.loss()
    """

    def __init__(self, model: nn.Module, *, first_multiplier: float = 10.0, include_bn1d: bool = False) -> None:
        kinds: tuple[type, ...] = (nn.BatchNorm2d, nn.BatchNorm1d) if include_bn1d else (nn.BatchNorm2d,)
        self.layers: list[nn.modules.batchnorm._BatchNorm] = [
            m for m in model.modules() if isinstance(m, kinds) and m.running_mean is not None and m.running_var is not None
        ]
        if not self.layers:
            raise PfdError(
                f"{type(model).__name__}: no BatchNorm layer with running statistics to match (eq. 6); "
                "use a backbone with BatchNorm or set rta.lambda_bn = 0"
            )
        self.first_multiplier = float(first_multiplier)
        self.weights = [self.first_multiplier] + [1.0] * (len(self.layers) - 1)
        # Per layer, the last pass's (Σx, Σx², n) (float64 sums with graph) or (mean, var, None).
        self._stats: list[tuple[torch.Tensor, torch.Tensor, int | None] | None] = [None] * len(self.layers)
        self._consts: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._counts: tuple[Any, torch.Tensor | None] = (None, None)
        self._patched: list[nn.Module] = []
        for i, m in enumerate(self.layers):
            if "forward" in m.__dict__:
                self.remove()
                raise PfdError(f"{type(m).__name__} layer {i}: its forward is already replaced (another BNStatistics "
                               "on the same model?); remove that one first")
            m.forward = self._make_forward(i, m)  # type: ignore[method-assign]
            self._patched.append(m)

    def _make_forward(self, index: int, module: nn.modules.batchnorm._BatchNorm) -> Any:
        native = type(module).forward

        def forward(x: torch.Tensor) -> torch.Tensor:
            rm, rv = module.running_mean, module.running_var
            if module.training or rm is None or rv is None:
                y = native(module, x)
                mean, var = batch_moments(x, shift=rm.detach().float() if rm is not None else None)
                self._stats[index] = (mean, var, None)
            else:
                module._check_input_dim(x)
                y, s1, s2 = _EvalBNWithSums.apply(x, rm, rv, module.weight, module.bias, module.eps)
                self._stats[index] = (s1, s2, x.numel() // x.shape[1])
            return y

        return forward

    def _check_ran(self) -> list[tuple[torch.Tensor, torch.Tensor, int | None]]:
        if any(t is None for t in self._stats):
            missing = sum(t is None for t in self._stats)
            raise RuntimeError(f"{missing} hooked BatchNorm layer(s) did not run; call the model before loss()")
        return self._stats  # type: ignore[return-value]

    @property
    def moments(self) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        """Per hooked layer, the last pass's batch ``(mean (C,), biased var (C,))`` in float32 (with graph)."""
        out: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        for t in self._stats:
            if t is None or t[2] is None:
                out.append(None if t is None else (t[0], t[1]))
            else:
                mean = t[0] / t[2]
                out.append((mean.float(), (t[1] / t[2] - mean * mean).clamp_min(0.0).float()))
        return out

    def _layer_terms(self, targets: Targets | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(L,)`` per-layer ``‖μ_l − RM_l‖₂ + ‖σ²_l − RV_l‖₂``, all layers in one batched reduction, and the weights
        (``targets`` in place of the running statistics when given)."""
        stats = self._check_ran()
        L = len(stats)
        dev = stats[0][0].device
        if dev not in self._consts:
            sizes = torch.tensor([layer.num_features for layer in self.layers] * 2, device=dev)
            seg = torch.repeat_interleave(torch.arange(2 * L, device=dev), sizes)  # (2·ΣC,) distance of each entry
            self._consts[dev] = (seg, torch.tensor(self.weights, device=dev))
        seg, weights = self._consts[dev]
        if all(t[2] is not None for t in stats):  # the fused path: sums -> moments for every layer at once
            s1 = torch.cat([t[0] for t in stats])  # (ΣC,) float64
            s2 = torch.cat([t[1] for t in stats])
            counts = tuple(int(t[2]) for t in stats)  # type: ignore[arg-type]
            if self._counts[0] != (dev, counts):  # elements per channel of each layer (changes with the batch)
                sizes = torch.tensor([layer.num_features for layer in self.layers], device=dev)
                self._counts = ((dev, counts), torch.repeat_interleave(torch.tensor(counts, dtype=s1.dtype, device=dev), sizes))
            n = self._counts[1]  # (ΣC,)
            mean = s1 / n
            var = (s2 / n - mean * mean).clamp_min(0.0)
            moments = torch.cat([mean, var]).float()  # (2·ΣC,) means, then variances
        else:
            ms = self.moments
            moments = torch.cat([m[0] for m in ms] + [m[1] for m in ms])  # type: ignore[index]
        if targets is None:
            ref = torch.cat([m.running_mean for m in self.layers] + [m.running_var for m in self.layers])  # type: ignore[misc]
        else:
            if len(targets) != L or any(t[0].numel() != m.num_features for t, m in zip(targets, self.layers)):
                raise PfdError(f"BN targets for {len(targets)} layers do not fit the model's {L} hooked BatchNorm layers")
            ref = torch.cat([t[0].to(dev) for t in targets] + [t[1].to(dev) for t in targets])
        sq = torch.zeros(2 * L, device=dev).index_add_(0, seg, (moments - ref.detach().float()).square())  # (2L,)
        # ‖·‖₂ = √Σ; the clamp gives an exactly matched layer the norm's zero subgradient, not NaN.
        norms = sq.clamp_min(torch.finfo(sq.dtype).tiny).sqrt()
        return norms[:L] + norms[L:], weights

    def terms(self, targets: Targets | None = None) -> list[torch.Tensor]:
        """Unweighted per-layer terms ``‖μ_l − RM_l‖₂ + ‖σ²_l − RV_l‖₂`` of the last pass.

        Args:
            targets: Per hooked layer ``(mean (C,), var (C,))`` to match instead of its running
                statistics (e.g. one lighting group's, :func:`bn_input_moments`); ``None``: eq. 6.

        Raises:
            RuntimeError: If a hooked layer has not run since the hooks were registered.
        """
        return list(self._layer_terms(targets)[0].unbind())

    def loss(self, targets: Targets | None = None) -> torch.Tensor:
        """L_bn (eq. 6) of the last forward pass, first layer × ``first_multiplier``.

        Args:
            targets: Per hooked layer ``(mean (C,), var (C,))`` in place of the running statistics
                (:func:`bn_input_moments` of a subset of the data); ``None``: the running statistics (eq. 6).

        Raises:
            RuntimeError: If a hooked layer has not run since the hooks were registered.
            PfdError: If ``targets`` do not fit the hooked layers.
        """
        terms, weights = self._layer_terms(targets)
        return (terms * weights).sum()

    def clear(self) -> None:
        """Forget the statistics of the last pass (releases its graph)."""
        self._stats = [None] * len(self.layers)

    def remove(self) -> None:
        """Give every hooked layer its own forward back (idempotent)."""
        for m in self._patched:
            m.__dict__.pop("forward", None)
        self._patched = []
        self.clear()

    @property
    def active(self) -> bool:
        """Whether the layers still record their statistics."""
        return bool(self._patched)

    def __enter__(self) -> "BNStatistics":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def __len__(self) -> int:
        return len(self.layers)


@torch.no_grad()
def bn_input_moments(model: nn.Module, batches: Iterable[torch.Tensor], *, include_bn1d: bool = False
                     ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Mean and biased variance of every BatchNorm layer's input over a whole set of images.

    What the running statistics estimate, computed exactly over the given images (the model in eval
    mode, its buffers untouched): the targets of eq. 6 for a subset of the data, e.g. one lighting
    group of the private set (:mod:`pfd.distill.lighting`). Sums are accumulated in float64.

    Args:
        model: The network, in eval mode (the layers :class:`BNStatistics` hooks).
        batches: ``(B, 3, H, W)`` image batches on the model's device.
        include_bn1d: Also BatchNorm1d layers.

    Returns:
        Per hooked layer ``(mean (C,), var (C,))`` float32 on the CPU.

    Raises:
        PfdError: If no batch was given.
    """
    sums: list[list[Any]] | None = None
    with BNStatistics(model, first_multiplier=1.0, include_bn1d=include_bn1d) as bn:
        for x in batches:
            model(x)
            stats = bn._check_ran()
            if any(t[2] is None for t in stats):
                raise PfdError("bn_input_moments: put the model in eval mode first")
            if sums is None:
                sums = [[t[0].double(), t[1].double(), int(t[2])] for t in stats]  # type: ignore[arg-type]
            else:
                for acc, t in zip(sums, stats):
                    acc[0] = acc[0] + t[0].double()
                    acc[1] = acc[1] + t[1].double()
                    acc[2] += int(t[2])  # type: ignore[arg-type]
            bn.clear()
    if sums is None:
        raise PfdError("bn_input_moments: no images")
    out = []
    for s1, s2, n in sums:
        mean = s1 / n
        out.append((mean.float().cpu(), (s2 / n - mean * mean).clamp_min(0.0).float().cpu()))
    return out
