"""The privacy-utility benchmark (``benchmarks/privacy_utility.py``), in parts ("pu" = privacy-utility).

* :mod:`pu.data`: scenarios (named presets), dataset specs, the seeded CelebA split, pairs;
  :mod:`pu.yale`: the Yale photos; :mod:`pu.augment`: the public model's augmentation;
* :mod:`pu.settings`: the settings, rows and the naming of units (``row/seedN``);
* :mod:`pu.units`: one scenario's units: release, downstream model, utility, linkability, membership;
* :mod:`pu.stats`: identity-bootstrap intervals of utility and membership differences;
* :mod:`pu.plan`: the cost model of ``--plan``;
* :mod:`pu.runner`: the public model, (scenario, seed) groups in worker processes, shards, merging;
* :mod:`pu.report`, :mod:`pu.table`: the markdown tables;
* :mod:`pu.ablation`: one-seed ablations of pfd inside the paper's method.

The scripts ``privacy_utility.py``, ``pu_ablation.py`` and ``pu_report.py`` beside this folder are
the entry points (run by hand, not in CI).
"""
