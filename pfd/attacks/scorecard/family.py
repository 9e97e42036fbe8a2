"""The scorecard's verdict as one decision over all its figures (family-wise, Bonferroni).

Each summary row has its own verdict at the 5 % level (:func:`pfd.attacks.contract.verdict`): with
30 rows a release at chance shows about 1.5 "LEAKS" by luck, so "no row says LEAKS" would refuse
most releases at chance. The release-level verdict (the card's and report.html's first line)
therefore asks whether *any* figure leaks at family-wise level ``alpha`` (5 %): each of the ``m``
rows is tested at ``alpha / m`` (Bonferroni; valid whatever the dependence between rows):

* a **rate** (count of linked proxies at the effective sample size ``n_eff`` of its clustered
  interval): its exact interval at confidence ``1 − alpha / m``
  (:func:`pfd.attacks.metrics.clopper_pearson` at ``n_eff``) lies above chance;
* a **test** (attributes, the source's rank, membership): ``p <= alpha / m``; an ``inconclusive``
  membership row never counts.

Its false-alarm rate under the null (no row has any signal) is tested by simulation
(``tests/attacks/scorecard/test_family.py``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["family_leaks"]


def family_leaks(rows: Sequence[Mapping[str, Any]], *, alpha: float = 0.05) -> list[Mapping[str, Any]]:
    """The rows that leak at family-wise level ``alpha`` (module docstring).

    Args:
        rows: Summary rows (``kind``, ``value``, ``chance``, ``ci95``, ``n_eff`` or ``n``, ``p``, ``verdict``).
        alpha: Family-wise error rate.

    Returns:
        The leaking rows, in order.
    """
    from pfd.attacks.metrics import clopper_pearson

    m = max(len(rows), 1)
    a = alpha / m
    out = []
    for r in rows:
        if r.get("verdict") == "inconclusive":
            continue
        if r.get("p") is not None:
            leak = float(r["p"]) <= a
        elif r["kind"] == "rate" and (r.get("n_eff") or r.get("n")):
            n = float(r.get("n_eff") or r["n"])
            lo, _ = clopper_pearson(min(float(r["value"]) * n, n), n, alpha=a)
            leak = lo > float(r["chance"])
        else:  # a figure with no count or p-value: its own verdict
            leak = r.get("verdict") == "LEAKS"
        if leak:
            out.append(r)
    return out
