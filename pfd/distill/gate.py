"""The publication gate: the checks a release must pass before ``pfd distill`` writes it.

A release is the last thing a run writes, and only when the pipeline's own attacks cannot link it
(DESIGN, *Publication gate*). The checks, on the released (uint8) pixels:

* ``ogp_margin`` (``pfd`` only): the share of private embeddings with ``|cos(M e, e)| < m`` after
  OGP (eq. 3's margin) reaches ``OGPConfig.target_below_margin``. Below it the rotation has not
  moved the private identities away from their source coordinates, which is what keeps the
  insider at chance.
* ``insider_vismatch`` / ``insider_reid``: the publisher's adapted model embeds proxies and private
  images; Visual Matching (nearest private image) and Rank-1 Re-ID (nearest identity template)
  must not link proxies to their source identity above chance.
* ``public_vismatch`` / ``public_reid``: the same with the public model an outside attacker has.

A linkability check fails when its 95 % interval lies above chance (the scorecard's LEAKS verdict
in :mod:`pfd.attacks.scorecard.report`), with the interval and chance of :mod:`pfd.attacks.linkability.matching`:
an exact binomial interval at the effective sample size of proxies clustered by source identity,
and chance from the gallery's composition. Over 200 simulated releases with no signal
(``tests/test_gate.py``) each check refused at most 1 % of them (the test allows 7 %); a refusal
is the safe error, and ``--allow-linkable`` publishes anyway.

"Not shown above chance" is not "at chance": a check also fails when its interval's upper end,
the largest linkage rate the audit does not exclude, is more than ``rule_out`` (5) times chance
(``ReleaseConfig.rule_out``). Chance successes number about ``K`` (proxies per identity), so this
is a matter of ``K`` more than of the number of identities: in the power simulation of
``benchmarks/gate_power.py`` (docs/distill.md) a release at chance passes each check in >= 98 % of
draws from ``K = 3`` (86-94 % at ``K = 2``; at ``K = 1`` nothing can rule out 5x chance), while a
leak of 5x chance passes in <= 2 % at every ``N`` and ``K >= 2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pfd.errors import PfdError

__all__ = ["RULE_OUT", "PublicationRefused", "interval_verdict", "linkability_check", "margin_check", "publication_checks", "failed_checks", "format_checks"]


class PublicationRefused(PfdError):
    """The gate failed: nothing was published. ``summary`` is the run's ``summary.json``.

    ``pfd distill`` exits with status 3 for it (:attr:`exit_code`), not the 2 of a usage error.
    """

    exit_code = 3

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary or {}


def margin_check(below_margin: float, target: float) -> dict[str, Any]:
    """The ``ogp_margin`` check: ``below_margin >= target``.

    Args:
        below_margin: Share of private images with ``|cos(M e, e)| < m`` (eq. 3).
        target: The share OGP must reach.
    """
    return {"name": "ogp_margin", "value": float(below_margin), "target": float(target),
            "passed": bool(below_margin >= target)}  # fmt: skip


#: Default multiple of chance a check's interval must exclude (``ReleaseConfig.rule_out``).
RULE_OUT = 5.0


def linkability_check(
    name: str, attack: str, proxy_emb: torch.Tensor, proxy_source: np.ndarray, private_emb: torch.Tensor,
    private_labels: np.ndarray, *, rule_out: float = RULE_OUT,
) -> dict[str, Any]:
    """One linkability check with the attack suite's own attack, interval and chance.

    Args:
        name: Check name (e.g. ``public_reid``).
        attack: ``"vismatch"`` or ``"reid"``.
        proxy_emb: Normalised proxy embeddings ``(n, D)``.
        proxy_source: Source identity of each proxy ``(n,)`` (labels of ``private_labels``).
        private_emb: Normalised private embeddings ``(m, D)``.
        private_labels: Identity of each private image ``(m,)``.
        rule_out: The interval must exclude rates above this multiple of chance (0: no such rule).

    Returns:
        ``name``, ``rate``, ``count``, ``n``, ``chance``, ``ci95``, ``leaks`` (the interval lies
        above chance), ``bound_multiple`` (its upper end / chance: what the check cannot rule
        out), ``unresolved`` (that is above ``rule_out``) and ``passed`` (neither).
    """
    from pfd.attacks.linkability.matching import rank1_reid, visual_matching

    fn = {"vismatch": visual_matching, "reid": rank1_reid}[attack]
    r = fn(proxy_emb, proxy_source, private_emb, private_labels)
    return {"name": name, "rate": float(r.rate), "count": int(r.count), "n": int(r.n),
            **interval_verdict(r.ci95, r.chance, rule_out=rule_out)}


def interval_verdict(ci95: Any, chance: float, *, rule_out: float = RULE_OUT) -> dict[str, Any]:
    """The gate's verdict on one linkability interval (pure).

    Args:
        ci95: ``(low, high)`` of the linkage rate.
        chance: The rate of an attacker who guesses.
        rule_out: Multiple of chance the interval must exclude (0: no such rule).

    Returns:
        ``chance``, ``ci95``, ``leaks`` (``low > chance``), ``bound_multiple`` (``high / chance``),
        ``rule_out``, ``unresolved`` (``bound_multiple > rule_out``) and ``passed`` (neither).
    """
    lo, hi = (float(v) for v in ci95)
    chance = float(chance)
    leaks = lo > chance
    bound = hi / chance if chance > 0 else float("inf")
    unresolved = bool(rule_out) and bound > rule_out
    return {"chance": chance, "ci95": [lo, hi], "leaks": bool(leaks), "bound_multiple": float(bound),
            "rule_out": float(rule_out), "unresolved": bool(unresolved), "passed": not leaks and not unresolved}


def publication_checks(
    *,
    proxy_source: np.ndarray,
    private_labels: np.ndarray,
    insider: tuple[torch.Tensor, torch.Tensor],
    public: tuple[torch.Tensor, torch.Tensor] | None,
    below_margin: float | None = None,
    target: float | None = None,
    rule_out: float = RULE_OUT,
) -> list[dict[str, Any]]:
    """Every check of the gate.

    Args:
        proxy_source: Source identity of each proxy ``(n,)``.
        private_labels: Identity of each private image ``(m,)``.
        insider: ``(proxy_emb (n, D), private_emb (m, D))`` with the adapted model.
        public: The same with the public model (``None`` skips the public checks).
        below_margin: OGP's share below eq. 3's margin (``None``: no rotation, no check).
        target: Its target.
        rule_out: Multiple of chance each linkability interval must exclude (:func:`linkability_check`).

    Returns:
        One dict per check, in a fixed order.
    """
    checks = []
    if below_margin is not None and target is not None:
        checks.append(margin_check(below_margin, target))
    for who, pair in (("insider", insider), ("public", public)):
        if pair is None:
            continue
        for attack in ("vismatch", "reid"):
            checks.append(linkability_check(f"{who}_{attack}", attack, pair[0], proxy_source, pair[1], private_labels,
                                            rule_out=rule_out))
    return checks


def failed_checks(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checks that did not pass."""
    return [c for c in checks if not c["passed"]]


def format_checks(checks: list[dict[str, Any]]) -> str:
    """One line per check, e.g. ``public_reid 8.3% (CI 4.6-14.7%, chance 4.2%; rules out > 3.5x chance) passed``.

    The upper end of the interval is what the audit can rule out: a rate above it is excluded, a
    rate below it is not, whatever the point estimate says.
    """
    lines = []
    for c in checks:
        verdict = "passed" if c["passed"] else "FAILED"
        if c["name"] == "ogp_margin":
            lines.append(f"{c['name']:<17} {c['value']:.3f} below the repulsion margin (target {c['target']:.2f}) {verdict}")
        else:
            lo, hi = c["ci95"]
            bound = c.get("bound_multiple")
            rules = f"; rules out > {bound:.1f}x chance" if bound is not None and np.isfinite(bound) else ""
            why = ""
            if not c["passed"]:
                why = " (above chance)" if c.get("leaks", True) else (
                    f" (cannot rule out {bound:.1f}x chance, more than {c['rule_out']:g}x: too few proxies per identity)")
            lines.append(f"{c['name']:<17} {100 * c['rate']:.1f}% (CI {100 * lo:.1f}-{100 * hi:.1f}%, "
                         f"chance {100 * c['chance']:.1f}%{rules}) {verdict}{why}")  # fmt: skip
    return "\n".join(lines)
