"""pfd: publish private face-recognition training data safely, and audit what it leaks.

The public API is re-exported here; see README.md for a tour and docs/ for each stage.
"""

from __future__ import annotations

__version__ = "0.1.0"

from pfd.errors import PfdError

__all__ = ["__version__", "PfdError"]
