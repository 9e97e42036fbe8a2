"""The privacy-utility benchmark (``benchmarks/privacy_utility.py``), in parts ("pu" = privacy-utility).

* :mod:`benchmarks.pu.data`: scenarios (named presets), dataset specs, the seeded CelebA split, pairs;
  :mod:`benchmarks.pu.yale`: the Yale photos; :mod:`benchmarks.pu.augment`: the public model's augmentation;
* :mod:`benchmarks.pu.settings`: the settings, rows and the naming of units (``row/seedN``);
* :mod:`benchmarks.pu.units`: one scenario's units: release, downstream model, utility, linkability, membership;
* :mod:`pfd.card.stats`, :mod:`pfd.data.pair_sampling`, :mod:`pfd.card.downstream` (in the package: ``pfd card`` runs the
  same units): identity-bootstrap intervals, verification pairs, the downstream fine-tune and its gain;
* :mod:`benchmarks.pu.plan`: the cost model of ``--plan``;
* :mod:`benchmarks.pu.runner`: the public model, (scenario, seed) groups in worker processes, shards, merging;
* :mod:`benchmarks.pu.report`, :mod:`benchmarks.pu.table`: the markdown tables;
* :mod:`benchmarks.pu.ablation`: one-seed ablations of pfd inside the paper's method.

The scripts ``privacy_utility.py``, ``pu_ablation.py`` and ``pu_report.py`` beside this folder are
the entry points (run by hand, not in CI).
"""
