"""Entry point of ``python -m benchmarks.pu_report``: see :mod:`benchmarks.pu.report` (benchmarks/pu/report.py)."""

import sys

from benchmarks.pu.report import main

if __name__ == "__main__":
    sys.exit(main())
