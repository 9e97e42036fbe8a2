"""The release scorecard: every registered attack on a release, collected and written.

* :mod:`~pfd.attacks.scorecard.inputs`: the release, the state dir and the private set, checked;
* :mod:`~pfd.attacks.scorecard.run`: :func:`~pfd.attacks.scorecard.run.run_scorecard`, which runs
  every registered attack (:mod:`pfd.audit.contract`; PFD paper, "Privacy evaluation");
* :mod:`~pfd.attacks.scorecard.report`: ``report.json`` / ``report.md`` and the plots.
"""
