"""How often the one verdict refuses a release that is at chance, or passes one that leaks: simulated audits.

A release at chance is one whose proxies no model links to their sources: for every attacker the
audit consults (insider, public and the judge) the proxies' embeddings are independent of their
source identities. :func:`simulate` draws such audits at a release's size, runs every *registered*
check that reads embeddings alone (:attr:`~pfd.audit.contract.Check.embeddings_only`: linkability,
hubness, the source's rank, class-level linking; the same classes ``pfd attack`` runs) and takes :func:`pfd.audit.verdict.decide`'s verdict. Two planted signals:
``leak`` pulls each proxy towards its source's centre in every model (``leak = 0`` is the null), and
``linked`` makes the proxies of that share of the people copies of their source's own photos in
every model (:data:`PLANT` 2; a leak that links some people fully, whatever the class tightness, and
the rest not at all: the form a publisher's bound speaks of).

The simulated embeddings (per model, independent across models): private images of ``N``
identities × ``imgs`` around a random unit centre each, spread ``sigma``; the ``K`` proxies of a
source around a centre of their own (proxies of one source resemble each other, as pfd's do, which
clusters their outcomes). Reconstructions, attributes and membership are not simulated: their rows
enter the same Bonferroni split, whose bound holds whatever their dependence.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

import pfd.attacks.builtin  # noqa: F401 - the built-in attacks registered, whether or not pfd is installed
from pfd.audit.contract import AuditInputs, Check, ordered_checks
from pfd.audit.verdict import LEVEL, decide

#: Version of the ``linked`` plant (recorded by the calibration benchmark): 2 = a linked person's
#: proxies are copies of their own photos.
PLANT = 2

__all__ = ["NullAudits", "simulate"]


@dataclass
class NullAudits:
    """The outcome of :func:`simulate`.

    Attributes:
        draws: Simulated audits.
        refused: Audits the verdict refused.
        leaks: Audits refused through a LEAKS row.
        unresolved: Audits refused only because the design could not rule out the verdict's bound.
        by_row: Refusals per row label.
        reid_ratio: Mean over audits and attackers of the Rank-1 Re-ID rate over its chance (about
            1 at the null; what a planted ``leak`` amounts to).
    """

    draws: int
    refused: int = 0
    leaks: int = 0
    unresolved: int = 0
    by_row: dict[str, int] = field(default_factory=dict)
    reid_ratio: float = 0.0

    @property
    def rate(self) -> float:
        """Share of audits refused."""
        return self.refused / self.draws if self.draws else 0.0


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True)


def _view(gen: torch.Generator, n_ids: int, k: int, imgs: int, dim: int, sigma: float, leak: float,
          linked: torch.Tensor) -> dict[str, torch.Tensor]:
    centres = _unit(torch.randn(n_ids, dim, generator=gen))
    private = _unit(centres.repeat_interleave(imgs, 0) + sigma * torch.randn(n_ids * imgs, dim, generator=gen))
    own = _unit(torch.randn(n_ids, dim, generator=gen) + leak * centres)  # (N, D): each source's proxies share a centre
    proxies = _unit(own.repeat_interleave(k, 0) + sigma * torch.randn(n_ids * k, dim, generator=gen))  # (N*K, D)
    # A linked person's K proxies ARE K of their own photos in this model (plant version 2): the link is
    # realised whatever sigma. Version 1 put them at the identity's centre plus proxy noise, which at
    # sigma 0.5 (noise norm ~ sigma * sqrt(D) = 4 >> 1) realised about a sixth of the planted links.
    who = torch.nonzero(linked).flatten()  # (L,)
    if len(who):
        j = torch.arange(k)
        proxies[(who[:, None] * k + j).flatten()] = private[(who[:, None] * imgs + j % imgs).flatten()]
    return {"private": private, "proxies": proxies}


def _null_config(cls: type[Check], permutations: int) -> Any:
    """A check's default config, with the simulation's number of permutations where it has that setting."""
    names = {f.name for f in fields(cls.config)}
    return cls.config(**({"permutations": permutations} if "permutations" in names else {}))


def simulate(n_ids: int, k: int, *, draws: int = 100, imgs: int = 20, attackers: int = 3, dim: int = 64,
             sigma: float = 0.5, leak: float = 0.0, linked: float = 0.0, seed: int = 0,
             permutations: int | None = None) -> NullAudits:
    """The verdicts of ``draws`` simulated audits of a release of ``n_ids`` identities × ``k`` proxies.

    Args:
        n_ids: Private identities N.
        k: Proxies per identity K.
        draws: Simulated audits.
        imgs: Private images per identity.
        attackers: Models (insider, public, judge).
        dim: Embedding dimension.
        sigma: Spread of images around their identity centre (and of proxies around theirs).
        leak: Pull of each source's proxies towards its centre (0: a release at chance).
        linked: Share of the people whose K proxies are K of their own photos in every model (the
            same people in every model; 0: none).
        seed: Seed of the simulation.
        permutations: Draws of each source-rank test (default: the fewest that can reach the
            per-figure level, with a margin).

    Returns:
        A :class:`NullAudits`.
    """
    kinds = [cls for cls in ordered_checks() if cls.embeddings_only]
    m = attackers * sum(cls.rows_per_attacker for cls in kinds)  # the gating tests the Bonferroni split counts
    perms = permutations or int(np.ceil(1.5 * m / LEVEL))
    gen = torch.Generator().manual_seed(int(seed))
    source = np.repeat(np.arange(n_ids), k)
    labels = np.repeat(np.arange(n_ids), imgs)
    roles = ["insider", "public", "judge"][:attackers]
    models = [SimpleNamespace(role=r, distance="cosine") for r in roles]
    checks = [cls(_null_config(cls, perms)) for cls in kinds]
    out = NullAudits(draws=draws)
    for d in range(draws):
        inputs = AuditInputs(cfg=SimpleNamespace(seed=int(seed) * 100_003 + d), state=None, sets=None, attackers=models,
                             source=source, labels=labels, private_spec="simulated", progress=False)
        chosen = torch.zeros(n_ids, dtype=torch.bool)
        chosen[torch.randperm(n_ids, generator=gen)[: int(round(linked * n_ids))]] = True
        for role in roles:
            inputs._emb[role] = _view(gen, n_ids, k, imgs, dim, sigma, leak, chosen)
        rows = [row for c in checks for row in c.run(inputs).rows()]
        v = decide(rows)
        reid = [r.value / r.chance for r in rows if r.label.startswith("Rank-1 Re-ID (proxies)")]
        out.reid_ratio += float(np.mean(reid)) / draws if reid else 0.0
        if not v.publishable:
            out.refused += 1
            out.leaks += bool(v.leaks)
            out.unresolved += bool(v.unresolved and not v.leaks)
            for r in v.refusals:
                out.by_row[r.label] = out.by_row.get(r.label, 0) + 1
    return out
