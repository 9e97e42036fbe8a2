"""Attribute recovery: do proxies carry their sources' attributes? (PFD paper, Tab. 4)

* :mod:`~pfd.attacks.attributes.recovery`: predictors, Macro-F1 and balanced accuracy against chance;
* :mod:`~pfd.attacks.attributes.probe`: the attacker's probe, fitted on auxiliary labelled faces;
* :mod:`~pfd.attacks.attributes.attack`: that as a registered scorecard attack.
"""
