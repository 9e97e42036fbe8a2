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

from typing import Sequence

from pfd.audit.contract import CHECKS
from pfd.audit.rows import AuditRow
from pfd.audit.verdict import BOUND, REFUSING, RULE_OUT, people_needed

__all__ = ["advice", "refusal_advice", "remedy", "REMEDIES", "CHECK_REMEDIES"]

#: The one remedy table (issue 52: the gate said "longer OGP schedule" where the card said "fewer RTA
#: iterations" for the same refusal). ``pfd distill``'s one-line error, ``pfd attack``'s and ``pfd card``'s
#: pages all read it through :func:`remedy`. By the attacker's role, for a linking row ...
REMEDIES: dict[str, str] = {
    "public": ("distill again into a new --state-dir with the de-linking term against the public model "
               "(--lambda-delink 10 with a --judge, a face model no loss sees); with the term already on, a larger "
               "--lambda-delink or fewer RTA iterations: the released proxies must not carry what this model recognises"),
    "judge": ("the proxies carry their sources' identity to a model no loss saw: distill again with a larger "
              "--lambda-delink or fewer RTA iterations, and audit again with the same judge"),
    "insider": ("the adapted model still finds the sources: continue OGP longer (--resume --ogp-steps, e.g. twice "
                "counts.ogp_steps of summary.json) so that the rotation decouples them; where the source's rank refuses, "
                "distill again into a new --state-dir with a larger lambda_insider in the recipe's [distill.rta] "
                "(50 instead of 10 made the insider's ranks uniform at 100 people, docs/distill.md); keep the state dir "
                "private: it holds that model"),
}
#: ... and by the pass/fail check (its registry name, the row's ``check``).
CHECK_REMEDIES: dict[str, str] = {
    "ogp_margin": ("continue OGP longer: --resume --ogp-steps (e.g. twice counts.ogp_steps of summary.json); "
                           "what follows it is redone"),
    "private_copies": "a released image copies a private photo: distill again from noise (--init noise) "
                                       "into a new --state-dir",
    "judge_competence": ("the judge recognises no one, so its rows would vouch for nothing: --resume "
                                            "with another --judge, a face model no loss sees that recognises the private people"),
    "integrity": "the release on disk is not what pfd wrote: run pfd release lint and publish again with pfd "
                         "distill --resume",
}
_OUTSIDE = ("an outside face model links the release: distill again with the de-linking term against it "
            "(--lambda-delink, --judge) and audit again with it as --attacker")
_DESIGN = "audit at least {need} private identities; more proxies per identity do not narrow it"


def remedy(row: AuditRow) -> str:
    """What the publisher can do about one refusing row: the one table above (module docstring).

    Args:
        row: A refusing row of :func:`pfd.audit.verdict.decide` (``family``, ``kind``, ``attack``, ``attacker``).

    Returns:
        One sentence.
    """
    if row.kind == "check":
        return CHECK_REMEDIES.get(_check_name(row), "fix what the check names, then distill or audit again "
                                                    "(the detail says how)")
    if row.family == "unresolved":
        bound = BOUND if row.bound_required is None else row.bound_required
        return _DESIGN.format(need=people_needed(bound, RULE_OUT if row.rule_out_multiple is None else row.rule_out_multiple))
    return REMEDIES.get(row.attacker or "-", _OUTSIDE)


def _check_name(row: AuditRow) -> str:
    """A check row's registry name; a row written before rows named their check, by its registered title."""
    return row.check or next((n for n, cls in CHECKS.items() if cls.title == row.attack), "")


def advice(row: AuditRow) -> dict[str, str]:
    """The attacker's gain and the publisher's remedy for one refusing row.

    Args:
        row: A row of the audit after :func:`pfd.audit.verdict.decide` (``attack``, ``attacker``,
            ``kind``, ``value``, ``chance``, ``count``/``n``, ``family``, ``detail`` for a check).

    Returns:
        ``{"row", "gain", "remedy"}``: the row's label and two sentences.
    """
    who = row.attacker or "-"
    fix = remedy(row)
    if row.kind == "check":
        return {"row": row.label, "gain": row.detail or "the check failed", "remedy": fix}
    if row.family == "unresolved":
        gain = (f"too few people to tell: even at chance the audit cannot rule out that an attacker names "
                f"{100 * float(row.design_share or 0.0):.0f} % of the {row.people} people")
        return {"row": row.label, "gain": gain, "remedy": fix}
    value, chance = row.value, row.chance
    if row.kind == "rate" and row.n:
        times = f", {value / chance:.1f}× chance" if chance > 0 else ""
        count = row.count if row.count is not None else round(value * row.n)
        gain = (f"with the {who} model an attacker names the source person of {count} "
                f"of {row.n} proxies ({100 * value:.1f} %{times})")
    elif row.best and row.n:  # class-level linking: a count of classes, the best of several attacks
        gain = (f"with the {who} model an attacker who reads each class as a whole names the source person of "
                f"{row.count} of {row.n} classes ({row.best.replace('_', ' ')}; chance 1 in "
                f"{round(1 / chance) if chance > 0 else '?'}, p = {float(row.p or 0.0):.2g})")
    elif row.p is not None:
        gain = (f"with the {who} model the proxies' sources are not placed at random (p = {row.p:.2g}): an "
                "attacker who knows the pattern narrows down who each proxy came from")
    else:
        gain = f"with the {who} model: {value:.3f} against chance {chance:.3f}"
    return {"row": row.label, "gain": gain, "remedy": fix}


def refusal_advice(rows: Sequence[AuditRow]) -> list[dict[str, str]]:
    """:func:`advice` of every refusing row (failed checks first), in the audit's order."""
    order = {family: k for k, family in enumerate(REFUSING)}
    refusing = [r for r in rows if r.family in order]
    return [advice(r) for r in sorted(refusing, key=lambda r: order[str(r.family)])]
