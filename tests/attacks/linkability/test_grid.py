"""The report's match grid (pfd.attacks.linkability.grid)."""

from types import SimpleNamespace

import numpy as np

from pfd.attacks.linkability.grid import match_grid
from pfd.attacks.linkability.matching import LinkFigures
from pfd.audit.grid import GridHub


def test_the_match_grid_points_out_a_hub_that_is_the_nearest_photo_in_most_rows():
    """Issue 34: a hub (one photo nearest to every proxy) filled the grid's "nearest private" column
    like a wall of links, with no word that it is one photo."""
    from pfd.data.faceset import to_memory
    from pfd.data.sources import open_faces

    private = to_memory(open_faces("synthetic:private,ids=4,imgs=2,size=32"))
    proxies = to_memory(open_faces("synthetic:test,ids=4,imgs=2,size=32"))
    sets = SimpleNamespace(proxies=lambda size: proxies, private=lambda size: private)
    source = np.repeat(np.arange(4), 2)
    hub = SimpleNamespace(match_index=np.array([5, 5, 5, 5, 5, 5, 0, 5]), success=np.zeros(8, bool))
    grid = match_grid(LinkFigures("proxies", "public", {"vismatch": hub}), sets, SimpleNamespace(size=32), source,
                      None, np.arange(8), 8)
    assert grid.hub == GridHub(rows=3, of=4, identity=private.identities[2])  # rows: proxies 0, 2, 4, 6; photo 5 is identity 2's
    spread = SimpleNamespace(match_index=np.array([0, 1, 2, 3, 4, 5, 6, 7]), success=np.zeros(8, bool))
    grid = match_grid(LinkFigures("proxies", "public", {"vismatch": spread}), sets, SimpleNamespace(size=32), source,
                      None, np.arange(8), 8)
    assert grid.hub is None and [c for c, _ in grid.columns()] == ["proxy", "nearest private", "true source"]
    assert grid.proxies.shape == (4, 3, 32, 32) and grid.success == [False] * 4
