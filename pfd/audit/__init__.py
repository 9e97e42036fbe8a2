"""The one audit: what a check is, the inputs it reads, the engine that runs every registered check,
the intervals every row states, and the one verdict (DESIGN, *One audit, one verdict*).

* :mod:`~pfd.audit.contract`: :class:`~pfd.audit.contract.Check`, its result, the registry;
* :mod:`~pfd.audit.inputs`: the release, the publisher's state dir and the private set, checked;
* :mod:`~pfd.audit.sets`: the private set and the release (on disk or in memory), opened once per size;
* :mod:`~pfd.audit.team`: the attackers an audit consults (public, insider, judge, the auditor's own);
* :mod:`~pfd.audit.engine`: :func:`~pfd.audit.engine.run_audit` and the ways in (``pfd attack``,
  ``pfd card``, ``pfd distill``'s gate);
* :mod:`~pfd.audit.checks`: the pass/fail checks (integrity, private copies, OGP's margin, the judge);
* :mod:`~pfd.audit.intervals`, :mod:`~pfd.audit.verdict`, :mod:`~pfd.audit.advice`, :mod:`~pfd.audit.risk`:
  the rows' intervals, the family-wise verdict, the remedy table, per-identity risk.

The attacks (:mod:`pfd.attacks`) implement the contract from the floor above and register through
the ``pfd.checks`` entry-point group, so nothing here imports them.
"""
