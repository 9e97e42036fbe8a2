"""Entry point of ``python benchmarks/pu_ablation.py``: see :mod:`pu.ablation` (benchmarks/pu/ablation.py)."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from pu.ablation import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
