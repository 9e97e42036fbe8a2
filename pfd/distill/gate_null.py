"""How often the whole publication gate refuses a release that is at chance: simulated audits.

A release at chance is one whose proxies no model links to their sources: for every model the
gate consults (insider, public, and the judge when there is one) the proxies' embeddings are
independent of their source identities. :func:`null_refusals` draws such audits at a release's
size and runs every linkability check of :func:`pfd.distill.gate.publication_checks` on them, with
the gate's own attacks, chance, intervals, family-wise LEAKS level and rule-out.

The simulated embeddings (per model, independent across models):

* private images: ``N`` identities × ``imgs`` images around a random unit centre per identity,
  spread ``sigma`` (so VisMatch and Re-ID of one model see the same gallery and are correlated,
  as in a real gate);
* proxies: for source identity ``c``, ``K`` proxies around a centre of their own (a "prototype"
  the source does not determine), spread ``sigma``: proxies of one source resemble each other,
  as pfd's do, which clusters their outcomes. Random directions in ``D`` dimensions also make
  hubs (a gallery identity near many proxies) as they occur in real embeddings.

The figure quoted in docs/distill.md is :func:`null_refusals` at the demo's size with 10,000 draws
(``python -m benchmarks.gate_power --whole-gate``); ``tests/distill/test_gate.py`` runs a smaller one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pfd.distill.gate import ALPHA, RULE_OUT, failed_checks, publication_checks

__all__ = ["NullGate", "null_refusals"]


@dataclass(frozen=True)
class NullGate:
    """The outcome of :func:`null_refusals`.

    Attributes:
        draws: Simulated audits.
        refused: Audits in which at least one check failed.
        by_check: Failures per check name.
        leaks: Audits refused through a LEAKS test.
        unresolved: Audits refused because an interval could not rule out ``rule_out`` × chance.
    """

    draws: int
    refused: int
    by_check: dict[str, int]
    leaks: int
    unresolved: int

    @property
    def rate(self) -> float:
        """Share of audits refused."""
        return self.refused / self.draws if self.draws else 0.0


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True)


def _model_view(gen: torch.Generator, n_ids: int, k: int, imgs: int, dim: int, sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    centres = _unit(torch.randn(n_ids, dim, generator=gen))
    private = _unit(centres.repeat_interleave(imgs, 0) + sigma * torch.randn(n_ids * imgs, dim, generator=gen))
    own = _unit(torch.randn(n_ids, dim, generator=gen))  # (N, D): each source's proxies share a centre
    proxies = _unit(own.repeat_interleave(k, 0) + sigma * torch.randn(n_ids * k, dim, generator=gen))
    return proxies, private


def null_refusals(
    n_ids: int, k: int, *, imgs: int = 20, judge: bool = True, draws: int = 1000, dim: int = 64, sigma: float = 0.5,
    alpha: float = ALPHA, rule_out: float = RULE_OUT, seed: int = 0,
) -> NullGate:
    """Refusals of the whole gate over ``draws`` simulated audits of a release at chance.

    Args:
        n_ids: Private identities N.
        k: Proxies per identity K.
        imgs: Private images per identity.
        judge: Whether the gate has a judge (12 linkability checks, else 8).
        draws: Simulated audits.
        dim: Embedding dimension.
        sigma: Spread of images around their identity centre (and of proxies around theirs).
        alpha: The gate's family-wise LEAKS level (``release.alpha``).
        rule_out: The gate's rule-out multiple (``release.rule_out``).
        seed: Seed of the simulation.

    Returns:
        A :class:`NullGate`.
    """
    gen = torch.Generator().manual_seed(int(seed))
    source = np.repeat(np.arange(n_ids), k)
    labels = np.repeat(np.arange(n_ids), imgs)
    refused = leaks = unresolved = 0
    by_check: dict[str, int] = {}
    for _ in range(draws):
        views = [_model_view(gen, n_ids, k, imgs, dim, sigma) for _ in range(3 if judge else 2)]
        checks = publication_checks(
            proxy_source=source, private_labels=labels, insider=views[0], public=views[1],
            judge=views[2] if judge else None, rule_out=rule_out, alpha=alpha,
        )  # fmt: skip
        failed = [c for c in failed_checks(checks) if "leaks" in c]  # the linkability checks (not the judge's competence)
        refused += bool(failed)
        leaks += any(c["leaks"] for c in failed)
        unresolved += any(c["unresolved"] and not c["leaks"] for c in failed)
        for c in failed:
            by_check[c["name"]] = by_check.get(c["name"], 0) + 1
    return NullGate(draws=draws, refused=refused, by_check=by_check, leaks=leaks, unresolved=unresolved)
