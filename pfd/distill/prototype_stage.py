"""Stage 2 of a distillation: the prototypes RTA distills against, and the private statistics it matches.

What :meth:`pfd.distill.pipeline.Distillation.prototypes` stores in ``state/prototypes.pt`` (private
state, never released):

* ``P`` ``(NK, D)``: per-identity K-means prototypes of the rotated embeddings ``E Mᵀ`` (eq. 8;
  ``E`` for the methods without a rotation), with the lighting lever drawn per (identity, lighting
  group) (:func:`pfd.distill.prototypes.lighting_prototypes`), and for ``pfd`` with each source
  moved to a uniformly random rank in the adapted model's space (``rta.source_ranks``);
* ``centers``, ``embeddings``, ``cos_rotated``: the insider's templates and gallery and eq. 3's
  ``cos(M e, e)`` per private image;
* ``spatial``: the private set's spatial statistics in the adapted model (``rta.lambda_spatial``);
* ``lighting``: the lighting groups and each group's BatchNorm input moments (and spatial
  statistics) (:mod:`pfd.distill.lighting`);
* ``raw_index``: the private images a real-image baseline releases.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch

from pfd.config import DistillConfig
from pfd.data.faceset import FaceSet
from pfd.distill.delink import rank_jitter, target_ranks
from pfd.distill.lighting import lighting_clusters, lighting_descriptor
from pfd.distill.methods import Method
from pfd.distill.ogp import rotate
from pfd.distill.prototypes import kmeans_prototypes, lighting_prototypes, raw_selection, uniform_source_ranks
from pfd.embed import Embedder, class_centers
from pfd.nn.bn_hooks import bn_input_moments
from pfd.io import atomic_torch_save
from pfd.nn.bn_hooks import Targets
from pfd.nn.spatial_stats import SpatialTargets, spatial_targets

__all__ = ["build_prototypes", "private_images", "private_spatial_targets", "Prototypes", "LightingTargets"]


@dataclass
class LightingTargets:
    """The lighting lever's private state (:mod:`pfd.distill.lighting`).

    Attributes:
        group: ``(n,)`` each private image's lighting group.
        proto_group: ``(NK,)`` each prototype's group (one group per RTA batch).
        identities: People in each group.
        bn: Per group, the BatchNorm input moments its batches match (empty: a method without L_bn).
        spatial: Per group, its spatial statistics (``rta.lambda_spatial``), or ``None``.
    """

    group: torch.Tensor
    proto_group: torch.Tensor
    identities: list[int]
    bn: list[Targets] = field(default_factory=list)
    spatial: list[SpatialTargets] | None = None


@dataclass
class Prototypes:
    """The content of ``state/prototypes.pt`` (module docstring; private state, never released).

    Saved as a plain dict of tensors and lists (``torch.load(weights_only=True)`` reads it), the
    optional entries absent when unset.

    Attributes:
        P: ``(NK, D)`` the prototypes RTA distills against (eq. 8).
        proto_identity: ``(NK,)`` each prototype's source identity.
        identities: Identity name per label.
        centers: ``(N, D)`` the insider's templates (original space).
        cos_rotated: ``(n,)`` ``cos(M e, e)`` per private image (eq. 3).
        embeddings: ``(n, D)`` the insider's gallery (original space).
        rotated: Whether the method rotates.
        raw_index: ``(NK,)`` the private images a real-image baseline releases.
        spatial: The private set's spatial statistics (``rta.lambda_spatial``).
        lighting: The lighting lever's state.
    """

    P: torch.Tensor
    proto_identity: torch.Tensor
    identities: list[str]
    centers: torch.Tensor
    cos_rotated: torch.Tensor
    embeddings: torch.Tensor
    rotated: bool
    raw_index: torch.Tensor | None = None
    spatial: SpatialTargets | None = None
    lighting: LightingTargets | None = None

    def save(self, path: str | os.PathLike) -> None:
        """Write ``prototypes.pt`` atomically."""
        doc: dict[str, object] = {k: v for k, v in vars(self).items() if v is not None and k != "lighting"}
        if self.lighting is not None:
            doc["lighting"] = {k: v for k, v in vars(self.lighting).items() if v is not None}
        atomic_torch_save(doc, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Prototypes:
        """Read ``prototypes.pt`` back."""
        return cls.from_dict(torch.load(path, map_location="cpu", weights_only=True))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Prototypes:
        """The record of a loaded ``prototypes.pt``."""
        light = doc.get("lighting")
        return cls(**{k: v for k, v in doc.items() if k != "lighting"},
                   lighting=LightingTargets(**light) if light else None)


def private_images(faces: FaceSet, device: Any, index: np.ndarray | None = None, batch: int = 128,
                   ) -> Iterator[torch.Tensor]:
    """The private images ``index`` (default all) in un-augmented batches ``(B, 3, H, W)`` on ``device``."""
    idx = np.arange(len(faces)) if index is None else np.asarray(index)
    return (torch.stack([faces[int(i)][0] for i in idx[lo:lo + batch]]).to(device) for lo in range(0, len(idx), batch))


def private_spatial_targets(backbone: torch.nn.Module, faces: FaceSet, cfg: DistillConfig, device: Any,
                            index: np.ndarray | None = None) -> SpatialTargets:
    """Spatial statistics of the private set (or of the images ``index``) in the adapted model (:mod:`pfd.nn.spatial_stats`)."""
    return spatial_targets(backbone, private_images(faces, device, index), grid=cfg.rta.spatial_grid)


def _lighting_groups(faces: FaceSet, cfg: DistillConfig, device: Any) -> np.ndarray:
    """The private images' lighting groups (:func:`pfd.distill.lighting.lighting_clusters`), ``(n,)``."""
    r = cfg.rta
    desc = np.concatenate([lighting_descriptor(x.cpu(), grid=r.lighting_grid)
                           for x in private_images(faces, device)])  # (n, G²)
    return lighting_clusters(desc, np.asarray(faces.labels), clusters=r.lighting_clusters,
                             min_identities=r.lighting_min_identities, seed=r.kmeans_seed)


def _lighting_targets(backbone: torch.nn.Module, faces: FaceSet, cfg: DistillConfig, device: Any, groups: np.ndarray,
                      proto_group: torch.Tensor, *, bn: bool) -> LightingTargets:
    """Each lighting group's BatchNorm input moments (``bn``: a method that matches them) and spatial
    statistics (``rta.lambda_spatial``) in the adapted model: private state."""
    backbone.eval()
    labels = np.asarray(faces.labels)
    out = LightingTargets(group=torch.from_numpy(groups), proto_group=proto_group,
                          identities=[len(np.unique(labels[groups == g])) for g in range(int(groups.max()) + 1)],
                          spatial=[] if cfg.rta.lambda_spatial > 0 else None)
    for g in range(int(groups.max()) + 1):
        index = np.flatnonzero(groups == g)
        if bn:  # ncfm matches no BN statistics: a pass over the group it would never read
            out.bn.append(bn_input_moments(backbone, private_images(faces, device, index)))
        if out.spatial is not None:
            out.spatial.append(private_spatial_targets(backbone, faces, cfg, device, index))
    return out


def build_prototypes(backbone: torch.nn.Module, M: torch.Tensor, faces: FaceSet, cfg: DistillConfig, *,
                     method: Method, lighting: bool, device: Any, progress: bool = False,
                     embed_cache: Path | None = None) -> Prototypes:
    """The content of ``prototypes.pt`` (module docstring).

    Args:
        backbone: The adapted model (eval mode is set where statistics are read).
        M: The rotation ``(D, D)`` (the identity for methods without one).
        faces: The private set.
        cfg: The run's settings (``rta.*`` decides K, K-means, ranks, spatial and lighting statistics).
        method: The method's record (rotation, real images).
        lighting: Whether the lighting lever is on.
        device: Where the adapted model runs.
        progress: Progress of the embedding pass.
        embed_cache: Folder of the embedding cache, if any.

    Returns:
        The :class:`Prototypes` (tensors on the CPU).
    """
    rta, n_ids = cfg.rta, faces.num_classes
    E = Embedder(backbone, batch_size=256, device=device, progress=progress, cache_dir=embed_cache)(faces)  # (n, D)
    E_rot = rotate(E, M)  # (n, D), eq. 1 row-wise
    groups = _lighting_groups(faces, cfg, device) if lighting else None
    if groups is not None:  # the lighting lever: each class's K prototypes span its lighting groups
        P, pid, proto_group = lighting_prototypes(
            E_rot, faces.labels, groups, k=rta.ipc, seed=rta.kmeans_seed, n_init=rta.kmeans_n_init,
            num_identities=n_ids, identities=faces.identities,
        )  # fmt: skip
    else:
        P, pid = kmeans_prototypes(E_rot, faces.labels, k=rta.ipc, seed=rta.kmeans_seed, n_init=rta.kmeans_n_init,
                                   num_identities=n_ids, identities=faces.identities)
    centers = class_centers(E, faces.labels, n_ids)  # (N, D) original space: the insider's templates
    if method.rotated and rta.source_ranks == "uniform":  # the insider's ranks, as the de-linking term's
        rows = np.arange(len(P))
        P = uniform_source_ranks(P, pid, centers, target_ranks(rows, n_ids, rta.ipc, seed=rta.seed),
                                 rank_jitter(rows, n_ids, rta.ipc, seed=rta.seed))
    doc = Prototypes(
        P=P, proto_identity=pid, identities=list(faces.identities), centers=centers,
        cos_rotated=(E_rot * E).sum(1),  # cos(M e, e) per private image, (n,)
        embeddings=E,  # (n, D) original space: the insider's gallery in the publication gate
        rotated=method.rotated,
    )  # fmt: skip
    if method.real_images:
        doc.raw_index = torch.from_numpy(raw_selection(E_rot, faces.labels, P, pid))
    elif rta.lambda_spatial > 0:
        doc.spatial = private_spatial_targets(backbone, faces, cfg, device)
    if groups is not None:
        doc.lighting = _lighting_targets(backbone, faces, cfg, device, groups, proto_group, bn=method.bn)
    return doc
