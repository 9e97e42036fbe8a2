"""The benchmark's units (benchmarks/pu/units.py): pfd's OGP stage shared across RTA variants (issue 35)."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.distill_public import PRIVATE, shared_root, tiny_distill_config, tiny_public


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from types import SimpleNamespace

    from benchmarks.pu.units import Bench
    from pfd.config import config_to_dict
    from pfd.data.faceset import to_memory
    from pfd.data.sources import open_faces

    root = tmp_path_factory.mktemp("bench")
    public = tiny_public(shared_root(tmp_path_factory) / "tiny-public")
    cfg = config_to_dict(tiny_distill_config(public, root))
    b = object.__new__(Bench)  # only what the distillation methods read: no pairs, no test set
    b.s = {"ogp": cfg["ogp"], "rta": cfg["rta"], "public_model": {"checkpoint": "tiny"}, "split": "test"}
    b.sc = SimpleNamespace(private=PRIVATE)
    b.size, b.public, b.work, b.progress, b.judge = 32, public, root / "work", False, None
    b.ogp_cache = root / "work" / "ogp-pfd"
    b.private = to_memory(open_faces(PRIVATE))
    return b


def test_pfd_rows_share_one_ogp_per_seed_and_ogp_settings_and_rta_variants_pay_only_rta(bench, tmp_path, monkeypatch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        adapted, spent = bench.pfd_finetune(0)
        assert spent > 0 and adapted.is_file()
        again, spent = bench.pfd_finetune(0)
        assert again == adapted and spent == 0.0
        rta_variant = copy.copy(bench)
        rta_variant.s = {**bench.s, "rta": {**bench.s["rta"], "iterations": 7}}  # only RTA changes: the same OGP
        assert rta_variant.pfd_finetune(0) == (adapted, 0.0)
        ogp_variant = copy.copy(bench)
        ogp_variant.s = {**bench.s, "ogp": {**bench.s["ogp"], "lr": 0.02}}
        assert ogp_variant.pfd_finetune(0)[0] != adapted  # other OGP settings: their own stage
        # A pfd row seeded with the shared stage skips fine-tuning and publishes through the gate.
        (tmp_path / "row").mkdir()
        summary = rta_variant.distill_row("pfd", {}, tmp_path / "row", 0, adapted)
        assert "adapt" in summary["skipped"] and (tmp_path / "row" / "release" / "manifest.json").is_file()
        # The unit's audit is the gate's, read from the state dir: nothing is audited twice.
        import pfd.audit.engine as scorecard

        monkeypatch.setattr(scorecard, "run_scorecard", lambda *a, **k: pytest.fail("audited the release again"))
        audit = rta_variant.audit(tmp_path / "row", reconstruct=False)
        assert audit["audit"]["verdict"] == summary["gate"]["verdict"] and audit["audit"]["seconds"] == 0.0
        assert [r["kind"] for r in audit["audit"]["summary"]] == [r["kind"] for r in summary["gate"]["checks"]]
        assert {"public", "insider"} <= set(audit["linkability"]["proxies"])  # the link figures, in the table's layout
    finally:
        torch.set_num_threads(threads)
