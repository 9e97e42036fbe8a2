"""Linkability attacks: can a released proxy be traced back to its source identity?

PFD paper, "Source-Identity Linkability" and the post-release reconstruction stress test (Fig. 3, 5):

* :mod:`~pfd.attacks.linkability.matching`: Visual Matching and Rank-1 Re-ID of proxies against a
  private gallery, with chance from the gallery's composition and clustered intervals;
* :mod:`~pfd.attacks.linkability.reconstruction`: embeddings turned back into face images
  (BN-prior inversion), which are then linked like the proxies.

``pfd.attacks.linkability`` re-exports the matching attacks (its names before the attacks were
grouped by family).
"""

from pfd.attacks.linkability.matching import *  # noqa: F401,F403 - the family's main names
from pfd.attacks.linkability.matching import __all__  # noqa: F401
