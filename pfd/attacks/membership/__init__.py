"""Membership attacks: was this identity, or this dataset, in a model's training set?

* :mod:`~pfd.attacks.membership.statistics`: identity-level geometric MIA (Öztürk & Marcel 2026,
  §3): PairCos, vMF κ, PenLogit, ProtoCE and the per-statistic report;
* :mod:`~pfd.attacks.membership.fusion`: their fusion by a small MLP under stratified CV (§5.4);
* :mod:`~pfd.attacks.membership.permutation`: the verdict, a max-T permutation test over the AUCs;
* :mod:`~pfd.attacks.membership.reference`: do members and non-members differ before training?
* :mod:`~pfd.attacks.membership.dataset`: dataset-level MIA by robust z-scores (Borsukiewicz et
  al. 2026, Algorithm 1);
* :mod:`~pfd.attacks.membership.audit`: both audits on any model (``pfd attack mia|dataset``);
* :mod:`~pfd.attacks.membership.downstream`: a release's membership leakage, through a model
  trained on public data + the release;
* :mod:`~pfd.attacks.membership.attack`: that as a registered scorecard attack.
"""
