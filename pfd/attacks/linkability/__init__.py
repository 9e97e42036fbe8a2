"""Linkability attacks: can a released proxy be traced back to its source identity?

PFD paper, "Source-Identity Linkability" and the post-release reconstruction stress test (Fig. 3, 5):

* :mod:`~pfd.attacks.linkability.matching`: Visual Matching and Rank-1 Re-ID of proxies against a
  private gallery, with chance from the gallery's composition and clustered intervals;
* :mod:`~pfd.attacks.linkability.hubness`: the same with the hubness-corrected ranking (CSLS);
* :mod:`~pfd.attacks.linkability.ranks`: where the source ranks (the rank-last attack, a uniformity test);
* :mod:`~pfd.attacks.linkability.classes`: each released class read as a whole (its centroid, the
  spread of each identity's rank across it), tested jointly by permutation;
* :mod:`~pfd.attacks.linkability.reconstruction`: embeddings turned back into face images
  (BN-prior inversion), which are then linked like the proxies;
* :mod:`~pfd.attacks.linkability.attacks`: all of them as registered scorecard attacks.
"""
