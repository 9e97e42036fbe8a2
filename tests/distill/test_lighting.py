"""The lighting lever (issue 35): descriptors, domain-level groups, proxies spanning them, per-group BN targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pfd.distill.lighting import allocate_proxies, cluster_batches, lighting_clusters, lighting_descriptor
from pfd.distill.prototypes import lighting_prototypes
from pfd.errors import PfdError


def _lit(direction: str, n: int = 1, size: int = 16, exposure: float = 1.0, seed: int = 0) -> torch.Tensor:
    """Faces stand-ins lit from one side: a horizontal or vertical ramp plus a little texture."""
    ramp = torch.linspace(0.1, 0.9, size)
    img = {"left": ramp.flip(0).expand(size, size), "right": ramp.expand(size, size),
           "top": ramp.flip(0)[:, None].expand(size, size), "bottom": ramp[:, None].expand(size, size),
           "even": torch.full((size, size), 0.5)}[direction]
    tex = 0.03 * torch.rand(n, 1, size, size, generator=torch.Generator().manual_seed(seed))
    return ((img * exposure)[None, None] + tex).clamp(0, 1).expand(n, 3, size, size).contiguous()


def test_the_descriptor_reads_where_the_light_falls_not_how_bright_the_image_is():
    left, right, top = (lighting_descriptor(_lit(d)) for d in ("left", "right", "top"))
    assert (left @ right.T).item() < -0.9  # opposite sides, opposite descriptors
    assert abs((left @ top.T).item()) < 0.2  # orthogonal directions
    dim = lighting_descriptor(_lit("left", exposure=0.5))
    assert (left @ dim.T).item() > 0.99  # half the exposure, the same light direction
    assert np.allclose(lighting_descriptor(torch.full((1, 3, 8, 8), 0.4)), 0.0)  # evenly lit: no direction
    with pytest.raises(PfdError, match="expected"):
        lighting_descriptor(torch.rand(2, 8, 8))


def _three_lights(ids: int = 12, per: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every identity photographed under the three lights in turn: descriptors, labels, true light."""
    imgs, labels, light = [], [], []
    for i in range(ids):
        for j in range(per):
            d = ("left", "right", "top")[j % 3]
            imgs.append(_lit(d, seed=100 * i + j))
            labels.append(i)
            light.append(j % 3)
    return lighting_descriptor(torch.cat(imgs)), np.array(labels), np.array(light)


def test_groups_recover_the_lights_and_none_pools_fewer_than_the_minimum_of_identities():
    desc, labels, light = _three_lights()
    groups = lighting_clusters(desc, labels, clusters=3, min_identities=5)
    assert len(np.unique(groups)) == 3
    for g in range(3):  # each group is exactly one light
        assert len(np.unique(light[groups == g])) == 1
    # A fourth light used by only two people: its own group would describe two persons, so it merges.
    extra = lighting_descriptor(_lit("bottom", 2, seed=7))
    desc4 = np.concatenate([desc, extra])
    labels4 = np.concatenate([labels, [0, 1]])
    g4 = lighting_clusters(desc4, labels4, clusters=4, min_identities=5)
    ids_per_group = [len(np.unique(labels4[g4 == g])) for g in np.unique(g4)]
    assert min(ids_per_group) >= 5 and len(ids_per_group) <= 3
    assert (lighting_clusters(desc, labels, clusters=3, min_identities=13) == 0).all()  # 12 people: one group
    sizes = np.bincount(lighting_clusters(desc4, labels4, clusters=4, min_identities=5))
    assert (np.diff(sizes) <= 0).all()  # numbered by size, largest first
    with pytest.raises(PfdError, match="lighting_clusters = 0"):
        lighting_clusters(desc, labels, clusters=0)


@pytest.mark.parametrize("seed", range(20))
def test_proxies_are_shared_among_groups_in_proportion_and_never_beyond_the_images_there(seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 9, size=rng.integers(1, 6))
    counts[0] += 10  # at least K images in all
    k = int(rng.integers(1, min(12, counts.sum()) + 1))
    share = allocate_proxies(counts, k)
    assert share.sum() == k and (share <= counts).all() and (share >= 0).all()
    quota = k * counts / counts.sum()
    assert (np.abs(share - quota) < 1.0 + 1e-9).all() or (share == counts).any()  # within one of its quota unless capped
    assert list(allocate_proxies(np.array([14, 6]), 10)) == [7, 3]
    assert list(allocate_proxies(np.array([1, 1, 8]), 3)) == [0, 0, 3]


def test_each_identity_s_prototypes_span_its_lighting_groups_and_batches_hold_one_group():
    desc, labels, light = _three_lights(ids=6, per=6)
    groups = lighting_clusters(desc, labels, clusters=3, min_identities=2)
    rng = np.random.default_rng(0)
    # Embeddings that carry the light: each group's images sit around their own direction.
    axes = np.eye(8)[:3] * 3
    emb = torch.from_numpy(axes[groups] + 0.3 * rng.standard_normal((len(labels), 8))).float()
    emb = torch.nn.functional.normalize(emb, dim=1)
    P, pid, pg = lighting_prototypes(emb, labels, groups, k=3, seed=0, n_init=2)
    assert torch.equal(pid, torch.arange(6).repeat_interleave(3))  # identity-major, as eq. 8's P
    for i in range(6):
        assert sorted(pg[3 * i:3 * i + 3].tolist()) == [0, 1, 2]  # one proxy per light: 2 images under each
    nearest = (P @ torch.from_numpy(axes).float().T).argmax(1)
    assert torch.equal(nearest, pg)  # each prototype lies in its own group's region of the space
    batches = cluster_batches(pg, 4)
    assert sorted(np.concatenate(batches).tolist()) == list(range(18))
    assert all(len(set(pg[b].tolist())) == 1 and len(b) <= 4 for b in batches)
    with pytest.raises(PfdError, match="fewer than K = 7"):
        lighting_prototypes(emb, labels, groups, k=7)


@pytest.fixture(scope="module")
def public(tmp_path_factory):
    from tests.distill_public import shared_root, tiny_public

    torch.set_num_threads(1)
    return tiny_public(shared_root(tmp_path_factory) / "tiny-public")


def test_a_run_with_the_lever_distils_each_batch_against_its_own_group_s_statistics(public, tmp_path):
    from pfd.distill.pipeline import distill
    from pfd.release.state_dir import StateDir
    from tests.distill_public import tiny_distill_config

    cfg = tiny_distill_config(public, tmp_path, rta={"iterations": 3, "lighting_clusters": 3, "lighting_min_identities": 2,
                                                     "batch_size": 5})
    res = distill(cfg, progress=False)
    st = StateDir.at(res.state_dir)
    protos = torch.load(st.prototypes, weights_only=True)
    light = protos["lighting"]
    groups, pg = light["group"].numpy(), light["proto_group"]
    labels = np.repeat(np.arange(6), 8)  # the tiny private set: 6 people x 8 photos, in order
    n_groups = int(groups.max()) + 1
    assert n_groups >= 2 and len(light["bn"]) == n_groups
    assert all(len(np.unique(labels[groups == g])) >= 2 for g in range(n_groups))  # domain-level groups
    for i in range(6):  # every proxy's group is one its source was photographed in
        assert set(pg[2 * i:2 * i + 2].tolist()) <= set(groups[labels == i].tolist())
    first = light["bn"][0][0][0]
    assert any(not torch.allclose(first, light["bn"][g][0][0]) for g in range(1, n_groups))  # groups differ
    for b in sorted(st.batches.glob("batch_*.pt")):
        rows = torch.load(b, weights_only=True)["rows"]
        assert len(set(pg[rows].tolist())) == 1  # one lighting group per RTA batch
    assert (res.release / "manifest.json").is_file() and res.summary["gate"]["checks"]
    told = res.summary["lighting"]["groups"]  # what the summary prints: aggregates per group
    assert [g["images"] for g in told] == np.bincount(groups).tolist() and sum(g["proxies"] for g in told) == 12
    assert all(g["identities"] >= 2 for g in told)
    from pfd.distill.summary import format_summary

    assert "lighting    group 0: " in format_summary(res.summary)


def test_the_prototype_stage_stores_group_bn_targets_only_for_methods_that_match_them(public, tmp_path):
    from pfd.data.sources import open_faces
    from pfd.distill.methods import get_method
    from pfd.distill.prototype_stage import Prototypes, build_prototypes
    from pfd.nn.checkpoints import load_backbone
    from tests.distill_public import PRIVATE, tiny_distill_config

    cfg = tiny_distill_config(public, tmp_path, rta={"lighting_clusters": 3, "lighting_min_identities": 2})
    faces = open_faces(PRIVATE, size=32)
    backbone = load_backbone(public).eval()
    M = torch.eye(32)
    docs = {m: build_prototypes(backbone, M, faces, cfg, method=get_method(m), lighting=True, device="cpu")
            for m in ("pfd", "ncfm")}
    n_groups = int(docs["pfd"].lighting.group.max()) + 1
    assert n_groups >= 2 and len(docs["pfd"].lighting.bn) == n_groups
    assert docs["ncfm"].lighting.bn == []  # NCFM has no L_bn: no pass over each group
    assert torch.equal(docs["ncfm"].lighting.group, docs["pfd"].lighting.group)
    # The record's round trip through prototypes.pt (a plain dict that weights_only loading reads).
    docs["pfd"].save(tmp_path / "p.pt")
    back = Prototypes.load(tmp_path / "p.pt")
    assert torch.equal(back.P, docs["pfd"].P) and back.identities == docs["pfd"].identities
    assert torch.equal(back.lighting.proto_group, docs["pfd"].lighting.proto_group)
    assert len(back.lighting.bn) == n_groups and back.raw_index is None
