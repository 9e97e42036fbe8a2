"""Do members and non-members differ before training? The reference-model check of a membership audit.

The membership verdict (:func:`pfd.attacks.membership.permutation.max_auc_permutation_test`) is exact when
members and non-members are exchangeable: identities drawn from one population and then split
at random. An audit often cannot choose its split: the members are whoever was trained on, the
non-members whoever else is at hand. Two fixed groups of people can differ in how compact a
face model makes them before it ever saw either. Then a model that never trained on the members
separates them anyway and the verdict says LEAKS: on Extended Yale B (28 private and 10 test
people) a fine-tune on public data alone did so on 2 of 3 seeds.

A **reference model** that trained on neither group, such as the public backbone the audited
model was fine-tuned from, shows such a difference directly. :func:`group_separation` asks whether
the reference tells the two groups apart **in either direction**: a max-T permutation test over
every statistic in both orientations (``2 × 4`` scores; exact under exchangeability, like the
verdict). When it does (``p <= alpha``), the groups are not exchangeable and the audited model's
verdict cannot be read as membership; :func:`pfd.attacks.membership.statistics.membership_report` then
reports the verdict as **inconclusive** instead of LEAKS.

What this check does not do: it cannot see an a-priori difference too small for its own test,
and such a difference still inflates the verdict. In simulation (``tests/attacks/membership/test_reference.py``'s
world, 28 vs 10 people, 100 audits each) groups whose a-priori spread differs by 3, 8 and 17 %
got LEAKS on 7, 9 and 10 % of audits with this check, against 15, 33 and 70 % without it, and
100 % → 0 % at 36 %; on exchangeable groups both stay near 5 % (3 % measured), and a real
membership effect is still found (90 % of audits, the check firing on 10 %). A random split of one population remains the only audit with an exact 5 %; the
reference check is what an audit of a fixed split can add. Comparing the audited model's AUC
with the reference model's on the same identities (bootstrap over identities, as the
privacy-utility benchmark reports) is the complementary, descriptive view.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from pfd.attacks.membership.permutation import max_auc_permutation_test

__all__ = ["group_separation"]


def group_separation(
    stats: Mapping[str, Any],
    is_member: Any,
    *,
    permutations: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Two-sided max-T permutation test: does a model tell the two groups apart at all?

    Args:
        stats: ``{name: (C,) per-identity statistic}`` in the reference model.
        is_member: ``(C,)`` bool.
        permutations: Label permutations of the null.
        seed: Seed of the permutations.
        alpha: Level of ``separates``.

    Returns:
        ``{"p", "separates": p <= alpha, "statistic": the score with the largest AUC (``-name``
        when members are *looser*), "auc": that AUC, "aucs_a_priori": {name: AUC with higher =
        member}, "null95", "permutations", "seed", "alpha"}``.

    Raises:
        PfdError: As :func:`~pfd.attacks.membership.permutation.max_auc_permutation_test`.
    """
    x = {n: np.asarray(v, dtype=np.float64).ravel() for n, v in stats.items()}
    both = {**x, **{f"-{n}": -v for n, v in x.items()}}  # both orientations in one max-T null
    t = max_auc_permutation_test(both, is_member, permutations=permutations, seed=seed, alpha=alpha)
    return {"p": t["p"], "separates": t["leaks"], "statistic": t["statistic"], "auc": t["auc"],
            "aucs_a_priori": {n: t["aucs"][n] for n in x}, "null95": t["null95"], "permutations": permutations,
            "seed": seed, "alpha": alpha}
