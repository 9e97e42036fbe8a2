"""Attribute recovery: do proxies carry their sources' attributes? (PFD paper, Tab. 4)

* :mod:`~pfd.attacks.attributes.recovery`: predictors, Macro-F1 and balanced accuracy against chance;
* :mod:`~pfd.attacks.attributes.probe`: the attacker's probe, fitted on auxiliary labelled faces.

``pfd.attacks.attributes`` re-exports the recovery functions (its names before the grouping).
"""

from pfd.attacks.attributes.recovery import *  # noqa: F401,F403 - the family's main names
from pfd.attacks.attributes.recovery import __all__  # noqa: F401
