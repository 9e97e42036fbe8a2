"""Attacker models: any face-recognition model an auditor holds, as an image -> embedding map.

* :mod:`~pfd.attacks.models.loading`: :func:`~pfd.attacks.models.loading.load_attacker` for pfd /
  insightface / AdaFace checkpoints and pfd-convention TorchScript, and the ``Attacker`` wrapper;
* :mod:`~pfd.attacks.models.outside`: ONNX, TOML specs, Python entry points, each with its input
  convention;
* :mod:`~pfd.attacks.models.torchscript`: reading TorchScript archives (shared by both).
"""
