"""Attacker models: any face-recognition model an auditor holds, as an image -> embedding map.

* :mod:`~pfd.attackers.loading`: :func:`~pfd.attackers.loading.load_attacker` for pfd /
  insightface / AdaFace checkpoints and pfd-convention TorchScript, and the ``Attacker`` wrapper;
* :mod:`~pfd.attackers.outside`: ONNX, TOML specs, Python entry points, each with its input
  convention;
* :mod:`~pfd.attackers.torchscript`: reading TorchScript archives (shared by both).
"""
