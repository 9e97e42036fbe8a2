"""The release scorecard: every attack on a release, collected, written and drawn.

* :mod:`~pfd.attacks.scorecard.inputs`: the release, the state dir and the private set, checked;
* :mod:`~pfd.attacks.scorecard.run`: :func:`run_scorecard`, which runs linkability, reconstruction,
  attribute recovery and the release-membership audit (PFD paper, "Privacy evaluation");
* :mod:`~pfd.attacks.scorecard.report`: ``report.json`` / ``report.md``;
* :mod:`~pfd.attacks.scorecard.plots`: ROC curves, densities, match grids.
"""

from pfd.attacks.scorecard.run import *  # noqa: F401,F403 - the family's main names
from pfd.attacks.scorecard.run import __all__  # noqa: F401
