"""Entry point of ``python benchmarks/pu_report.py``: see :mod:`pu.report` (benchmarks/pu/report.py)."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from pu.report import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
