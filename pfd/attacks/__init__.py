"""The attack suite, grouped by family (what ``pfd attack`` runs, and what it runs on).

* :mod:`pfd.attacks.linkability`: Visual Matching, Rank-1 Re-ID and the reconstruction attack
  (PFD paper, "Source-Identity Linkability", Fig. 3 and 5);
* :mod:`pfd.attacks.membership`: identity-level geometric MIA (PairCos, vMF κ, PenLogit, ProtoCE,
  their fusion; Öztürk & Marcel 2026), its permutation verdict and reference check, dataset-level
  MIA (Borsukiewicz et al. 2026), and the audits that run them on a model or a release;
* :mod:`pfd.attacks.attributes`: attribute recovery from proxies (PFD paper, Tab. 4);
* :mod:`pfd.attacks.models`: the attacker's models (pfd / insightface / AdaFace checkpoints,
  TorchScript, ONNX, TOML specs, Python entry points) with their input conventions;
* :mod:`pfd.attacks.scorecard`: the layer above: run every attack on a release, write the report
  and plots;
* :mod:`pfd.attacks.metrics`: the scores every family shares (intervals, chance, AUC, TPR@FPR).

Modules of the flat layout that now live inside a family fail to import with a message naming
their new place (``pfd.attacks.linkability``, ``.membership``, ``.attributes``, ``.models`` and
``.scorecard`` still import and hold their former names).
"""

from __future__ import annotations

import importlib.abc
import sys

#: Former flat module -> its module inside a family.
MOVED = {
    "reconstruction": "linkability.reconstruction",
    "fusion": "membership.fusion",
    "permutation": "membership.permutation",
    "reference": "membership.reference",
    "dataset_mia": "membership.dataset",
    "audit": "membership.audit",
    "downstream": "membership.downstream",
    "attribute_audit": "attributes.probe",
    "outside": "models.outside",
    "state": "scorecard.inputs",
    "report": "scorecard.report",
    "plots": "scorecard.plots",
}


class _MovedModules(importlib.abc.MetaPathFinder):
    """Last finder on ``sys.meta_path``: turns "no module named pfd.attacks.X" into where X went."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 - the finder protocol
        head, _, tail = fullname.rpartition(".")
        if head == __name__ and tail in MOVED:
            new = f"{__name__}.{MOVED[tail]}"
            raise ModuleNotFoundError(f"{fullname} moved to {new} when pfd.attacks was grouped by family; "
                                      f"import it from {new}", name=fullname)
        return None


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
