"""What a refusing row of the audit means: what an attacker gains, and what the publisher can do.

A card that says "LEAKS" and nothing else leaves the publisher with a number (issue 34). Each
refusing row (:func:`pfd.audit.verdict.decide`: ``family`` ``"leaks"``, ``"unresolved"`` or
``"failed"``) gets two sentences: the attacker's gain, in the row's own counts, and the remedy,
which depends on *who* attacks (the attacker's role) more than on the attack:

* ``public``: anyone with the public face model (or one like it) links the release;
* ``judge``: a model no loss ever saw links it, so the proxies carry their sources' identity;
* ``insider``: whoever holds the adapted model (the state dir) links it;
* any other role: an outside model given to the audit (``--attacker``).

Pure functions of a row; the card renders them under its verdict.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["advice", "refusal_advice", "REMEDIES"]

#: The remedy per attacker role (module docstring).
REMEDIES: dict[str, str] = {
    "public": ("re-distill with the de-linking term against the public model (--lambda-delink with a --judge), or "
               "fewer RTA iterations; the released proxies should not carry what this model recognises"),
    "judge": ("the proxies carry their sources' identity to a model no loss saw: re-distill with a larger "
              "--lambda-delink or fewer RTA iterations, and audit again with the same judge"),
    "insider": ("keep the state dir private (it holds the adapted model), and re-distill with pfd's defaults, which "
                "place each source at a uniformly random rank (rta.source_ranks, rta.lambda_insider)"),
}
_OUTSIDE = ("an outside face model links the release: re-distill with the de-linking term against it "
            "(--lambda-delink, --judge) and audit again with it as --attacker")


def advice(row: Mapping[str, Any]) -> dict[str, str]:
    """The attacker's gain and the publisher's remedy for one refusing row.

    Args:
        row: A row of the audit after :func:`pfd.audit.verdict.decide` (``attack``, ``attacker``,
            ``kind``, ``value``, ``chance``, ``count``/``n``, ``family``, ``detail`` for a check).

    Returns:
        ``{"row", "gain", "remedy"}``: the row's label and two sentences.
    """
    from pfd.audit.verdict import label

    who = str(row.get("attacker") or "-")
    if row.get("kind") == "check":
        return {"row": label(row), "gain": str(row.get("detail") or "the check failed"),
                "remedy": "fix what the check names, then distill or audit again (the detail says how)"}
    remedy = REMEDIES.get(who, _OUTSIDE)
    if row.get("family") == "unresolved":
        from pfd.audit.verdict import BOUND, RULE_OUT, people_needed

        gain = (f"too few people to tell: even at chance the audit cannot rule out that an attacker names "
                f"{100 * float(row['design_share']):.0f} % of the {row['people']} people")
        need = people_needed(float(row.get("bound_required", BOUND)), float(row.get("rule_out_multiple", RULE_OUT)))
        return {"row": label(row), "gain": gain,
                "remedy": f"audit at least {need} private identities; more proxies per identity do not narrow it"}
    value, chance = float(row.get("value", 0.0)), float(row.get("chance") or 0.0)
    if row.get("kind") == "rate" and row.get("n"):
        times = f", {value / chance:.1f}× chance" if chance > 0 else ""
        gain = (f"with the {who} model an attacker names the source person of {row.get('count', round(value * row['n']))} "
                f"of {row['n']} proxies ({100 * value:.1f} %{times})")
    elif row.get("best") and row.get("n"):  # class-level linking: a count of classes, the best of several attacks
        gain = (f"with the {who} model an attacker who reads each class as a whole names the source person of "
                f"{row.get('count')} of {row['n']} classes ({str(row['best']).replace('_', ' ')}; chance 1 in "
                f"{round(1 / chance) if chance > 0 else '?'}, p = {float(row['p']):.2g})")
    elif row.get("p") is not None:
        gain = (f"with the {who} model the proxies' sources are not placed at random (p = {float(row['p']):.2g}): an "
                "attacker who knows the pattern narrows down who each proxy came from")
    else:
        gain = f"with the {who} model: {value:.3f} against chance {chance:.3f}"
    return {"row": label(row), "gain": gain, "remedy": remedy}


def refusal_advice(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """:func:`advice` of every refusing row (failed checks first), in the audit's order."""
    from pfd.audit.verdict import REFUSING

    order = {family: k for k, family in enumerate(REFUSING)}
    refusing = [r for r in rows if r.get("family") in order]
    return [advice(r) for r in sorted(refusing, key=lambda r: order[str(r["family"])])]
