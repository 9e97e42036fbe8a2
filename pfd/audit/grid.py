"""The report's match grid as a record: a few proxies beside their nearest private photo and a photo
of their source, the images the report draws (``matches.png``).

A check's result builds it (:meth:`~pfd.audit.contract.CheckResult.grid`; the linkability family's
:func:`pfd.attacks.linkability.grid.match_grid`) after every check ran; the report reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["GridHub", "MatchGrid"]


@dataclass(frozen=True)
class GridHub:
    """One private photo that is the nearest in most rows of the grid (a hub, not a link; issue 34).

    Attributes:
        rows: Rows whose nearest photo it is.
        of: Rows of the grid.
        identity: Whose photo it is.
    """

    rows: int
    of: int
    identity: str


@dataclass(frozen=True)
class MatchGrid:
    """Images of the match grid, one row per shown proxy.

    Attributes:
        proxies: ``(rows, 3, H, W)`` the proxies.
        matches: ``(rows, 3, H, W)`` each proxy's nearest private photo (the public model's VisMatch).
        sources: ``(rows, 3, H, W)`` a photo of each proxy's source.
        success: Whether each row's match is its source.
        reconstructions: ``(rows, 3, H, W)`` the proxies' reconstructions, when that attack ran.
        hub: The photo that is the nearest in most rows, if one is.
    """

    proxies: torch.Tensor
    matches: torch.Tensor
    sources: torch.Tensor
    success: list[bool]
    reconstructions: torch.Tensor | None = None
    hub: GridHub | None = None

    def columns(self) -> list[tuple[str, torch.Tensor]]:
        """The grid's columns, titled, left to right."""
        cols = [("proxy", self.proxies)]
        if self.reconstructions is not None:
            cols.append(("reconstruction", self.reconstructions))
        return cols + [("nearest private", self.matches), ("true source", self.sources)]
