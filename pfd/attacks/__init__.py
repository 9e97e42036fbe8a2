"""The attack suite, grouped by family (what ``pfd attack`` runs, and what it runs on).

* :mod:`pfd.audit.contract`: what an attack is (config, ``applicable``, ``run``, a result that
  renders its report rows) and the registry the scorecard iterates; :mod:`pfd.attacks.builtin`
  registers the built-in ones;
* :mod:`pfd.attacks.linkability`: Visual Matching, Rank-1 Re-ID, their hubness-corrected forms,
  the rank of the source, class-level linking and the reconstruction attack (PFD paper,
  "Source-Identity Linkability", Fig. 3 and 5);
* :mod:`pfd.attacks.membership`: identity-level geometric MIA (PairCos, vMF κ, PenLogit, ProtoCE,
  their fusion; Öztürk & Marcel 2026), its permutation verdict and reference check, dataset-level
  MIA (Borsukiewicz et al. 2026), and the audits that run them on a model or a release;
* :mod:`pfd.attacks.attributes`: attribute recovery from proxies (PFD paper, Tab. 4);
* :mod:`pfd.attackers`: the attacker's models (pfd / insightface / AdaFace checkpoints,
  TorchScript, ONNX, TOML specs, Python entry points) with their input conventions;
* :mod:`pfd.attacks.scorecard`: the layer above: run every registered attack on a release, write
  the report;
* :mod:`pfd.attacks.metrics`, :mod:`pfd.attacks.plots`: the scores and plots every family shares.
"""
