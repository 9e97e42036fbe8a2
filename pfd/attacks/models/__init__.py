"""Attacker models: any face-recognition model an auditor holds, as an image -> embedding map.

* :mod:`~pfd.attacks.models.loading`: :func:`load_attacker` for pfd / insightface / AdaFace
  checkpoints and pfd-convention TorchScript, and the :class:`Attacker` wrapper;
* :mod:`~pfd.attacks.models.outside`: ONNX, TOML specs, Python entry points, each with its input
  convention;
* :mod:`~pfd.attacks.models.torchscript`: reading TorchScript archives (shared by both).

``pfd.attacks.models`` re-exports :mod:`~pfd.attacks.models.loading` (its names before the grouping).
"""

from pfd.attacks.models.loading import *  # noqa: F401,F403 - the family's main names
from pfd.attacks.models.loading import __all__  # noqa: F401
