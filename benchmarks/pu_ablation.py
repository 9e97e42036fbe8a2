"""Entry point of ``python -m benchmarks.pu_ablation``: see :mod:`benchmarks.pu.ablation` (benchmarks/pu/ablation.py)."""

import sys

from benchmarks.pu.ablation import main

if __name__ == "__main__":
    sys.exit(main())
