"""The report's match grid: a few proxies beside their public VisMatch match and a photo of their source.

Built by the linkability check's result (:meth:`~pfd.audit.contract.CheckResult.grid`) after every
check ran, so it can show the reconstruction attack's images beside the proxies they came from.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pfd.attacks.linkability.matching import LinkFigures
from pfd.audit.grid import GridHub, MatchGrid

__all__ = ["match_grid"]


def match_grid(link: LinkFigures, sets: Any, public: Any, source: np.ndarray,
          recon: torch.Tensor | None, pick: np.ndarray, rows: int) -> MatchGrid | None:
    """Images for the report's grid: the first proxies, (reconstructions,) public VisMatch matches, a source image.

    Args:
        link: The public attacker's links of the proxies (its ``"vismatch"`` result is shown).
        sets: The audit's :class:`~pfd.audit.sets.ReleaseSets`.
        public: The public attacker.
        source: ``(q,)`` each proxy's source label.
        recon: ``(r, 3, H, W)`` the reconstructions of the proxies ``pick``, or ``None``.
        pick: ``(r,)`` the reconstructed proxies.
        rows: Rows of the grid.

    Returns:
        The :class:`~pfd.audit.grid.MatchGrid` (with its hub when one private photo is the nearest for
        most rows); ``None`` when no proxy is shown.
    """
    proxies, private = sets.proxies(public.size), sets.private(public.size)
    vis = link.results["vismatch"]
    # Only reconstructed proxies when there are reconstructions; one per source identity, so the
    # grid shows different people.
    pool = pick if recon is not None else np.arange(len(source))
    _, first = np.unique(source[pool], return_index=True)
    order = pool[np.sort(first)[:rows]]
    if order.size == 0:
        return None
    # A hub (one private photo the nearest for most rows) reads like a wall of links; the grid says so (issue 34).
    photos, counts = np.unique(np.asarray(vis.match_index)[order], return_counts=True)
    hub = None
    if len(order) >= 3 and counts.max() * 2 > len(order):
        photo = int(photos[counts.argmax()])
        hub = GridHub(rows=int(counts.max()), of=int(len(order)),
                      identity=str(private.identities[int(private.labels[photo])]))
    reconstructions = None
    if recon is not None:
        where = {int(p): j for j, p in enumerate(pick)}
        reconstructions = recon[[where[int(i)] for i in order]]
    return MatchGrid(proxies=torch.stack([proxies[int(i)][0] for i in order]),
                     matches=torch.stack([private[int(vis.match_index[i])][0] for i in order]),
                     sources=torch.stack([private[int(private.indices_of(int(source[i]))[0])][0] for i in order]),
                     success=[bool(x) for x in vis.success[order]], reconstructions=reconstructions, hub=hub)
