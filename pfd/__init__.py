"""pfd: publish private face-recognition training data safely, and audit what it leaks.

The public API is re-exported here and imported lazily (PEP 562), so that ``import pfd`` and the
CLI start fast and only load torch, scikit-learn or geotorch when a name that needs them is used.

Example:
    >>> import pfd
    >>> faces = pfd.open_faces("synthetic:private,ids=4,imgs=3,size=32")
    >>> model = pfd.create_backbone("ir18", width=0.125, size=32)
    >>> emb = pfd.Embedder(model)(faces)  # (12, 512), unit rows

See README.md for a tour and docs/ for each stage.
"""

from __future__ import annotations

import importlib
from typing import Any

from pfd.errors import PfdError

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # configuration
    **{n: "pfd.config" for n in (
        "TrainConfig", "EvalConfig", "OGPConfig", "RTAConfig", "ReleaseConfig", "DistillConfig",
        "AttackConfig", "build_config", "load_recipe", "save_config", "validate_config",
    )},
    # data
    **{n: "pfd.data.faceset" for n in ("FaceSet", "FaceSubset", "TensorFaces", "ConcatFaces")},
    **{n: "pfd.data.faces" for n in (
        "FaceFolder", "split_identities", "split_images", "make_loader", "check_min_images", "check_min_identities",
    )},
    "open_faces": "pfd.data.sources",
    **{n: "pfd.data.recordio" for n in ("RecordIOFaces", "write_recordio", "build_index")},
    **{n: "pfd.data.pairs" for n in (
        "VerificationPairs", "read_pairs_txt", "read_bin", "write_bin",
    )},
    **{n: "pfd.data.pair_sampling" for n in ("generate_pairs", "adaptive_pairs", "pair_identities")},
    **{n: "pfd.data.synthetic" for n in ("SyntheticFaces", "open_synthetic", "write_synthetic")},
    **{n: "pfd.release.writer" for n in ("write_release", "write_proxy_map")},
    **{n: "pfd.release.state_dir" for n in ("StateDir", "prepare_state_dir", "read_proxy_map", "secure_state_dir")},
    **{n: "pfd.release.reader" for n in ("read_release", "check_complete_release")},
    **{n: "pfd.release.lint" for n in ("lint_release", "Finding")},
    "find_private_copies": "pfd.release.private_copies",
    "dhash": "pfd.release.phash",
    # models
    **{n: "pfd.nn.backbones" for n in ("create_backbone", "list_backbones")},
    **{n: "pfd.nn.heads" for n in ("create_head", "MarginHead", "penalty")},
    **{n: "pfd.nn.checkpoints" for n in ("save_checkpoint", "load_checkpoint", "load_backbone", "load_head")},
    "BNStatistics": "pfd.nn.bn_hooks",
    "tune_allocator": "pfd.allocator",
    "StagePeaks": "pfd.memory",
    # embedding, training, verification
    "Embedder": "pfd.embed",
    # (the functions pfd.train.train and pfd.distill.distill are reached through their modules:
    # a top-level name would shadow the subpackage of the same name)
    "Trainer": "pfd.train",
    **{n: "pfd.verify" for n in (
        "verification_metrics", "evaluate_pairs", "evaluate", "kfold_accuracy", "tar_at_far", "tar_key", "eer", "roc_auc",
    )},
    # distillation building blocks
    **{n: "pfd.distill.ogp" for n in ("Rotation", "OGPStep", "ogp_loss", "rotate")},
    **{n: "pfd.distill.rta" for n in ("rta_loss", "distill_loss", "ProxyDistiller")},
    "kmeans_prototypes": "pfd.distill.prototypes",
    "PublicationRefused": "pfd.distill.gate",
    # the one audit
    **{n: "pfd.audit.verdict" for n in ("decide", "Verdict")},
    "AuditRow": "pfd.audit.rows",
    **{n: "pfd.audit.engine" for n in ("run_audit", "run_scorecard", "audit_in_memory")},
    "OGPTrainer": "pfd.distill.ogp_trainer",
    # attacks
    **{n: "pfd.audit.intervals" for n in ("wilson_interval", "clopper_pearson", "clustered_interval",
                                          "composition_chance")},
    **{n: "pfd.attacks.metrics" for n in ("oriented_auc", "tpr_at_fpr")},
    "max_auc_permutation_test": "pfd.attacks.membership.permutation",
    "group_separation": "pfd.attacks.membership.reference",
    **{n: "pfd.attackers.loading" for n in ("load_attacker", "load_outside_attacker")},
    **{n: "pfd.attackers.outside" for n in ("AttackerSpec", "InputConvention")},
    **{n: "pfd.attacks.membership.statistics" for n in ("identity_statistics", "membership_report")},
    "fusion_cv": "pfd.attacks.membership.fusion",
    **{n: "pfd.attacks.membership.dataset" for n in ("dataset_membership", "most_likely")},
    **{n: "pfd.attacks.linkability.matching" for n in ("streamed_top1", "visual_matching", "rank1_reid")},
    "class_link_test": "pfd.attacks.linkability.classes",
    "class_spread": "pfd.attacks.linkability.spread",
    **{n: "pfd.attacks.attributes.recovery" for n in ("attribute_recovery", "LinearProbe", "read_attributes_csv")},
    # the privacy-utility card
    **{n: "pfd.card.config" for n in ("CardConfig", "DownstreamConfig", "CardEvalConfig")},
    **{n: "pfd.card.build" for n in ("Card", "make_card")},
    **{n: "pfd.card.stats" for n in ("identity_bootstrap_weights", "paired_difference")},
    **{n: "pfd.card.downstream" for n in ("utility_gain",)},
}

__all__ = ["__version__", "PfdError", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pfd' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
