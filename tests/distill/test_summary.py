"""Summary figures of a run: own-prototype rates and insider source linkage, and the printed table."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pfd.distill.summary import format_summary, proxy_rates


def test_proxy_rates_match_a_direct_count():
    torch.manual_seed(0)
    P = F.normalize(torch.randn(6, 8), dim=1)  # 3 identities x K = 2
    pid = torch.tensor([0, 0, 1, 1, 2, 2])
    centers = F.normalize(torch.randn(3, 8), dim=1)
    emb = F.normalize(torch.randn(6, 8), dim=1)
    rows = torch.tensor([0, 1, 2, 3, 4, 5])
    r = proxy_rates(emb, rows, P, pid, centers)
    own = sum(int(torch.argmax(emb[i] @ P.T)) == i for i in range(6)) / 6
    ident = sum(int(pid[torch.argmax(emb[i] @ P.T)]) == int(pid[i]) for i in range(6)) / 6
    top1 = sum(int(torch.argmax(emb[i] @ centers.T)) == int(pid[i]) for i in range(6)) / 6
    cos = sum(float(emb[i] @ centers[pid[i]]) for i in range(6)) / 6
    assert r["own_prototype"] == pytest.approx(own) and r["own_identity"] == pytest.approx(ident)
    assert r["source_top1"] == pytest.approx(top1) and r["source_cos"] == pytest.approx(cos, abs=1e-6)
    assert r["chance"] == pytest.approx(1 / 3)
    exact = proxy_rates(P, rows, P, pid, centers)  # proxies exactly on their prototypes
    assert exact["own_prototype"] == 1.0 and exact["own_identity"] == 1.0


def test_format_summary_names_times_counts_rates_and_next_steps(tmp_path):
    summary = {
        "method": "pfd", "release": str(tmp_path / "release"), "state_dir": str(tmp_path / "state"),
        "counts": {"identities": 24, "private_images": 480, "ipc": 5, "proxies": 120, "batches": 2, "processes": 1},
        "times_s": {"public": 1.0, "adapt": 2.0, "prototypes": 0.5, "rta": 9.0, "release": 0.1, "total": 12.6},
        "skipped": ["public"],
        "losses": {"ogp": {"cls": 0.5, "rep": 0.01, "iso": 0.02}, "rta": {"rta_first": 0.6, "rta_last": 0.2}},
        "rates": {"own_prototype": 0.7, "own_identity": 0.99, "source_cos": 0.03, "source_top1": 0.0,
                  "chance": 1 / 24, "below_margin": 0.96, "rep_margin": 0.1},
    }  # fmt: skip
    text = format_summary(summary, private="synthetic:private")
    for part in ("public skipped", "rta 9.0s", "total 12.6s", "24 identities", "120 proxies", "L_rep 0.010",
                 "L_RTA 0.600 -> 0.200", "own prototype 0.700", "< 0.1: 0.960", "chance 0.042",
                 "pfd release lint", "pfd attack --release", "--private synthetic:private"):  # fmt: skip
        assert part in text, part
    assert "--skip-bad" not in text and "memory" not in text  # no peaks measured: no line
    summary.update(memory_gb={"adapt": 1.25, "rta": 3.5, "release": 0.75}, stage_peaks=True)
    mem = next(line for line in format_summary(summary).splitlines() if line.startswith("memory"))
    assert mem == "memory      peak memory: adapt 1.2 GB  rta 3.5 GB  release 0.8 GB  | max 3.5 GB", mem
    summary["stage_peaks"] = False  # lifetime peaks (no clear_refs): said so
    assert "peak memory so far: adapt" in format_summary(summary)
    # Issue 20: after a --skip-bad run the suggested attack must skip the same bad files.
    skipped = format_summary(summary, private="faces dir/", skip_bad=True)
    attack = next(line for line in skipped.splitlines() if "pfd attack" in line)
    assert attack.endswith("--skip-bad") and "--private 'faces dir/'" in attack  # quoted for the shell
