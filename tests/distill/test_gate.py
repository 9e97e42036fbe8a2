"""The publication gate: its checks fail on leaked proxies and rarely on unrelated ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.distill.gate import failed_checks, format_checks, linkability_check, margin_check, publication_checks

N, PER, K, D = 12, 6, 3, 32


def _world(seed: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Private embeddings clustered by identity, and each proxy's source identity."""
    g = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(N, D, generator=g), dim=1)
    labels = np.repeat(np.arange(N), PER)
    private = F.normalize(centres[labels] + 0.3 * torch.randn(N * PER, D, generator=g), dim=1)  # (N*PER, D)
    source = np.repeat(np.arange(N), K)
    return private, labels, source


def test_margin_check():
    assert margin_check(0.96, 0.95)["passed"] and not margin_check(0.94, 0.95)["passed"]
    assert margin_check(0.95, 0.95)["passed"]  # the target itself is reached


def test_leaked_proxies_fail_every_linkability_check():
    private, labels, source = _world(0)
    g = torch.Generator().manual_seed(1)
    idx = np.array([np.flatnonzero(labels == s)[j % PER] for j, s in enumerate(source)])
    leaked = F.normalize(private[idx] + 0.05 * torch.randn(len(idx), D, generator=g), dim=1)  # near-copies
    checks = publication_checks(proxy_source=source, private_labels=labels, insider=(leaked, private),
                                public=(leaked, private), below_margin=0.99, target=0.95)  # fmt: skip
    links = [f"{who}_{a}" for who in ("insider", "public") for a in ("vismatch", "reid", "vismatch_csls", "reid_csls")]
    assert [c["name"] for c in checks] == ["ogp_margin", *links]
    assert [c["name"] for c in failed_checks(checks)] == links
    for c in checks[1:]:
        assert c["rate"] == 1.0 and c["ci95"][0] > c["chance"]
        assert c["chance"] == pytest.approx(1 / N)  # balanced gallery: the composition chance is 1/N
    text = format_checks(checks)
    assert text.count("FAILED") == 8 and "ogp_margin" in text and "passed" in text


def test_unrelated_proxies_rarely_fail_a_check_under_the_null():
    # 200 simulated releases whose proxies carry no information about their sources.
    fired = np.zeros(4)
    for seed in range(200):
        private, labels, source = _world(seed)
        g = torch.Generator().manual_seed(10_000 + seed)
        noise = F.normalize(torch.randn(len(source), D, generator=g), dim=1)
        for j, attack in enumerate(("vismatch", "reid", "vismatch_csls", "reid_csls")):
            fired[j] += not linkability_check(attack, attack, noise, source, private, labels)["passed"]
    assert (fired / 200 <= 0.07).all(), fired / 200


def test_public_checks_are_skipped_without_a_public_model():
    private, labels, source = _world(3)
    proxies = private[: len(source)]
    checks = publication_checks(proxy_source=source, private_labels=labels, insider=(proxies, private), public=None)
    assert [c["name"] for c in checks] == ["insider_vismatch", "insider_reid", "insider_vismatch_csls",
                                           "insider_reid_csls"]  # no rotation, no margin check


# -- what the gate can rule out (issue 20) ----------------------------------------------------------


def test_an_interval_that_cannot_exclude_five_times_chance_fails():
    from pfd.distill.gate import interval_verdict

    chance = 1 / 30
    ok = interval_verdict((0.002, 0.098), chance)  # 1/30 linked at K = 5: excludes > 2.9x chance
    assert ok["passed"] and not ok["leaks"] and ok["bound_multiple"] == pytest.approx(2.94)
    wide = interval_verdict((0.002, 0.170), chance)  # the 6/150 at K = 5 with clustered sources
    assert not wide["passed"] and wide["unresolved"] and not wide["leaks"]
    assert interval_verdict((0.002, 0.170), chance, rule_out=0)["passed"]  # the rule turned off
    above = interval_verdict((0.05, 0.2), chance)
    assert above["leaks"] and not above["passed"]
    text = format_checks([{"name": "public_reid", "rate": 0.04, **wide}])
    assert "cannot rule out 5.1x chance, more than 5x" in text and "FAILED" in text


@pytest.mark.parametrize("k, ratio, at_most, at_least", [
    (3, 1.0, None, 0.90),  # a release at chance passes (>= 98 % in benchmarks/gate_power.py)
    (5, 1.0, None, 0.90),
    (2, 5.0, 0.06, None),  # a leak of 5x chance is refused (<= 2 % pass there)
    (3, 5.0, 0.06, None),
    (1, 1.0, 0.75, None),  # one proxy per identity cannot rule out 5x chance most of the time
])
def test_simulated_releases_pass_at_chance_and_are_refused_at_five_times(k, ratio, at_most, at_least):
    from pfd.attacks.metrics import clustered_interval
    from pfd.distill.gate import interval_verdict

    rng = np.random.default_rng([k, int(ratio)])
    n_ids = 30
    cluster = np.repeat(np.arange(n_ids), k)
    passed = np.mean([interval_verdict(clustered_interval(rng.random(n_ids * k) < ratio / n_ids, cluster)["ci95"],
                                       1 / n_ids)["passed"] for _ in range(300)])
    if at_least is not None:
        assert passed >= at_least, passed
    if at_most is not None:
        assert passed <= at_most, passed


# -- the whole gate at chance, the judge, and what a refusal says (issue 27) ----------------------


def test_the_whole_gate_refuses_a_release_at_chance_of_the_demos_size_rarely():
    """docs/distill.md quotes 10,000 draws; here a smaller run of the same simulation.

    At the demo's size (24 people, K = 10, a judge: twelve linkability checks) the family-wise gate
    refused none of 200 null audits; with every check tested at 95 % on its own (the gate before
    issue 27) the same audits are refused several times as often as the 0.1 % target.
    """
    from pfd.distill.gate_null import null_refusals

    fam = null_refusals(24, 10, draws=200, seed=3)
    assert fam.refused <= 1, fam
    per_check = null_refusals(24, 10, draws=200, seed=3, alpha=0.025 * 12)  # 0.025 one-sided per check
    assert per_check.refused >= 3 and per_check.leaks == per_check.refused, per_check


def test_the_family_wise_level_splits_alpha_over_the_checks():
    private, labels, source = _world(2)
    noise = F.normalize(torch.randn(len(source), D, generator=torch.Generator().manual_seed(5)), dim=1)
    checks = publication_checks(proxy_source=source, private_labels=labels, insider=(noise, private),
                                public=(noise, private), judge=(noise, private), alpha=0.003)  # fmt: skip
    assert [c["name"] for c in checks][-4:] == ["judge_vismatch", "judge_reid", "judge_vismatch_csls", "judge_reid_csls"]
    links = [c for c in checks if c["name"] != "judge_competence"]
    assert len(links) == 12 and all(c["leak_alpha"] == pytest.approx(0.003 / 12) for c in links)
    # A one-sided 0.05 % lower end lies below the 95 % interval's 2.5 % one.
    assert all(c["leak_low"] <= c["ci95"][0] for c in links)


def test_a_hub_refusal_names_the_hub_not_too_few_proxies():
    """The own-data benchmark: one person was the nearest match of 288 of 300 proxies; the gate
    said "too few proxies per identity" although K = 10 was every photo each person had."""
    from pfd.distill.gate import failure_cause, link_diagnostics

    n_ids, k = 30, 10
    source = np.repeat(np.arange(n_ids), k)
    predicted = np.full(n_ids * k, 7)  # everything matched to identity 7: its own 10 proxies "link"
    d = link_diagnostics(predicted, source, predicted == source)
    assert d["hub"] and d["hub_share"] == 1.0 and d["hit_sources"] == 1
    c = {"name": "public_vismatch", "rate": 10 / 300, "count": 10, "leaks": False, "bound_multiple": 5.2,
         "rule_out": 5.0, **d}
    assert "hub" in failure_cause(c) and "too few" not in failure_cause(c)
    spread = {**c, "hub": False, "hit_sources": 8, "top_hit_share": 0.2}
    assert "too few proxies per identity" in failure_cause(spread)
    clustered = {**c, "hub": False, "hit_sources": 1, "top_hit_share": 1.0}
    assert "10 links from 1 source identity, clustered by source" in failure_cause(clustered)
    # The demo without the de-linking term: 26 links spread over several sources but with design effect 3.
    several = {**c, "hub": False, "count": 26, "hit_sources": 9, "top_hit_share": 0.3, "design_effect": 3.1}
    assert "26 links from 9 source identities, clustered by source (design effect 3.1)" in failure_cause(several)
    # An ordinary spread of predictions is no hub.
    rng = np.random.default_rng(0)
    assert not link_diagnostics(rng.integers(0, n_ids, 300), source, np.zeros(300, bool))["hub"]


def test_a_judge_that_recognises_nobody_fails_its_competence_check():
    """Own hostile case: `--judge` a model trained for two steps linked nothing, so its checks read "at
    chance" and vouched for the release."""
    from pfd.distill.gate import competence_check

    private, labels, source = _world(4)
    good = competence_check("judge_competence", private, labels)
    assert good["passed"] and good["rate"] > 0.5 and good["chance"] == pytest.approx((PER - 1) / (N * PER - 1))
    blind = F.normalize(torch.randn(len(labels), D, generator=torch.Generator().manual_seed(9)), dim=1)
    bad = competence_check("judge_competence", blind, labels)
    assert not bad["passed"] and "needs > 3x" in format_checks([bad])
    checks = publication_checks(proxy_source=source, private_labels=labels, insider=(blind[: len(source)], private),
                                public=None, judge=(blind[: len(source)], blind))
    assert [c["name"] for c in failed_checks(checks)] == ["judge_competence"]


# -- hubs (issue 26) -----------------------------------------------------------------------------


def _hub_world(seed: int, n_ids: int = 30, k: int = 10, imgs: int = 10, dim: int = 32):
    """Proxies at chance whose nearest private image is, for most of them, one person's (a hub):
    that person's photos sit near the proxies' common direction, as in a cross-domain gallery."""
    g = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(n_ids, dim, generator=g), dim=1)
    labels = np.repeat(np.arange(n_ids), imgs)
    common = F.normalize(torch.randn(1, dim, generator=g), dim=1)  # (1, D) the proxy domain's direction
    centres[7] = F.normalize(common[0] + 0.2 * centres[7], dim=0)  # identity 7 is a hub
    private = F.normalize(centres[labels] + 0.3 * torch.randn(n_ids * imgs, dim, generator=g), dim=1)
    source = np.repeat(np.arange(n_ids), k)
    own = F.normalize(torch.randn(n_ids, dim, generator=g), dim=1).repeat_interleave(k, 0)  # unrelated to the source
    proxies = F.normalize(common + 0.3 * own + 0.2 * torch.randn(n_ids * k, dim, generator=g), dim=1)
    return proxies, private, labels, source


def test_csls_removes_the_hub_that_the_plain_attack_matches_everything_to():
    from pfd.attacks.linkability.hubness import visual_matching_csls
    from pfd.attacks.linkability.matching import visual_matching

    proxies, private, labels, source = _hub_world(0)
    plain = visual_matching(proxies, source, private, labels)
    csls = visual_matching_csls(proxies, source, private, labels)
    plain_share = np.bincount(plain.predicted, minlength=30).max() / len(source)
    csls_share = np.bincount(csls.predicted, minlength=30).max() / len(source)
    assert plain_share >= 0.7 and csls_share <= 0.45, (plain_share, csls_share)  # measured 0.79 and 0.39
    assert plain.chance == csls.chance  # the same gallery, the same chance


def test_a_hub_alone_does_not_refuse_when_the_csls_check_rules_the_link_out():
    """The own-data benchmark's refusal: 10 of 300 linked (at chance), all the hub's own proxies,
    and an upper end of 17 % (> 5x chance). Here the hub's 11 links reach 4.6x chance and CSLS's
    2.6x, so a rule-out at 4x shows the same: the plain check alone would refuse, its CSLS
    counterpart rules the link out."""
    proxies, private, labels, source = _hub_world(0)
    checks = publication_checks(proxy_source=source, private_labels=labels, insider=(proxies, private), public=None,
                                rule_out=4.0)
    plain = next(c for c in checks if c["name"] == "insider_vismatch")
    csls = next(c for c in checks if c["name"] == "insider_vismatch_csls")
    assert plain["hub"] and not plain["leaks"] and plain["unresolved"], plain
    assert csls["passed"] and plain["passed"] and plain["deferred_to"] == "insider_vismatch_csls"
    assert "ruled out by insider_vismatch_csls" in format_checks([plain])
    # Without the hub's correction the same plain check refuses (the rule the deferral replaces).
    from pfd.distill.gate import defer_hubs

    undeferred = [{**c, "passed": c["name"] != "insider_vismatch"} for c in checks]
    failing = [dict(c) for c in undeferred if c["name"] != "insider_vismatch_csls"]
    assert not next(c for c in defer_hubs(failing) if c["name"] == "insider_vismatch")["passed"]
    # A leak is never deferred: the plain check that shows links above chance still refuses.
    leak = {**plain, "passed": False, "leaks": True, "deferred_to": None}
    assert not next(c for c in defer_hubs([leak, csls]) if c["name"] == "insider_vismatch")["passed"]


def test_every_check_the_gate_makes_is_one_a_manifest_may_record():
    from pfd.release.format import CHECK_NAMES

    private, labels, source = _world(5)
    checks = publication_checks(proxy_source=source, private_labels=labels, insider=(private[: len(source)], private),
                                public=(private[: len(source)], private), judge=(private[: len(source)], private),
                                below_margin=1.0, target=0.95)
    assert {c["name"] for c in checks} == set(CHECK_NAMES)
