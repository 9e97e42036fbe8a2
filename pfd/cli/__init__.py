"""The ``pfd`` command line: parse options, build a config dataclass, call the library.

Nothing here computes anything; each command is a thin wrapper over a library function so
that the same work is available from Python. :class:`~pfd.errors.PfdError` becomes a one-line
``Error: ...`` with exit status 2 (3 when the publication gate refused a release; 130 after Ctrl-C).

* :mod:`pfd.cli.group`: the ``pfd`` group, error handling, shared helpers;
* :mod:`pfd.cli.train`: ``train``, ``eval``, ``synth``; :mod:`pfd.cli.distill`: ``distill``;
* :mod:`pfd.cli.release`: ``release lint``; :mod:`pfd.cli.attack`: ``attack``, ``attack mia|dataset``; :mod:`pfd.cli.card`: ``card``.
"""

from pfd.cli import attack, card, distill, release, train  # noqa: F401 - each registers its commands on main
from pfd.cli.group import main

__all__ = ["main"]
