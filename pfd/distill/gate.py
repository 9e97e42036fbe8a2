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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pfd.errors import PfdError

__all__ = ["PublicationRefused", "linkability_check", "margin_check", "publication_checks", "failed_checks", "format_checks"]


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


def linkability_check(
    name: str, attack: str, proxy_emb: torch.Tensor, proxy_source: np.ndarray, private_emb: torch.Tensor, private_labels: np.ndarray
) -> dict[str, Any]:
    """One linkability check with the attack suite's own attack, interval and chance.

    Args:
        name: Check name (e.g. ``public_reid``).
        attack: ``"vismatch"`` or ``"reid"``.
        proxy_emb: Normalised proxy embeddings ``(n, D)``.
        proxy_source: Source identity of each proxy ``(n,)`` (labels of ``private_labels``).
        private_emb: Normalised private embeddings ``(m, D)``.
        private_labels: Identity of each private image ``(m,)``.

    Returns:
        ``name``, ``rate``, ``count``, ``n``, ``chance``, ``ci95`` and ``passed`` (the interval
        does not lie above chance).
    """
    from pfd.attacks.linkability.matching import rank1_reid, visual_matching

    fn = {"vismatch": visual_matching, "reid": rank1_reid}[attack]
    r = fn(proxy_emb, proxy_source, private_emb, private_labels)
    lo, hi = (float(v) for v in r.ci95)
    return {"name": name, "rate": float(r.rate), "count": int(r.count), "n": int(r.n), "chance": float(r.chance),
            "ci95": [lo, hi], "passed": not lo > r.chance}  # fmt: skip


def publication_checks(
    *,
    proxy_source: np.ndarray,
    private_labels: np.ndarray,
    insider: tuple[torch.Tensor, torch.Tensor],
    public: tuple[torch.Tensor, torch.Tensor] | None,
    below_margin: float | None = None,
    target: float | None = None,
) -> list[dict[str, Any]]:
    """Every check of the gate.

    Args:
        proxy_source: Source identity of each proxy ``(n,)``.
        private_labels: Identity of each private image ``(m,)``.
        insider: ``(proxy_emb (n, D), private_emb (m, D))`` with the adapted model.
        public: The same with the public model (``None`` skips the public checks).
        below_margin: OGP's share below eq. 3's margin (``None``: no rotation, no check).
        target: Its target.

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
            checks.append(linkability_check(f"{who}_{attack}", attack, pair[0], proxy_source, pair[1], private_labels))
    return checks


def failed_checks(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checks that did not pass."""
    return [c for c in checks if not c["passed"]]


def format_checks(checks: list[dict[str, Any]]) -> str:
    """One line per check, e.g. ``public_reid 8.3% (CI 4.6-14.7%, chance 4.2%) passed``."""
    lines = []
    for c in checks:
        verdict = "passed" if c["passed"] else "FAILED"
        if c["name"] == "ogp_margin":
            lines.append(f"{c['name']:<17} {c['value']:.3f} below the repulsion margin (target {c['target']:.2f}) {verdict}")
        else:
            lo, hi = c["ci95"]
            lines.append(f"{c['name']:<17} {100 * c['rate']:.1f}% (CI {100 * lo:.1f}-{100 * hi:.1f}%, "
                         f"chance {100 * c['chance']:.1f}%) {verdict}")  # fmt: skip
    return "\n".join(lines)
