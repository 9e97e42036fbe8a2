"""The release scorecard: every registered attack on a release, collected and written.

* :mod:`~pfd.audit.inputs`: the release, the state dir and the private set, checked;
* :mod:`~pfd.audit.engine`: :func:`~pfd.audit.engine.run_scorecard`, which runs
  every registered attack (:mod:`pfd.audit.contract`; PFD paper, "Privacy evaluation");
* :mod:`~pfd.attacks.scorecard.report`: ``report.json`` / ``report.md`` and the plots.
"""
