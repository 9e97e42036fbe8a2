"""Committed releases re-decided under today's verdict, from their committed audit rows (no re-run).

Verdict version 3 (issue 57) changed one step of :func:`pfd.audit.verdict.decide`: what the audit
rules out is a property of its design, not of the realised intervals. The figures themselves (each
row's value, chance, interval, p) are what the units measured, so every committed pfd release is
re-decided from its rows: the privacy-utility table's units (``benchmarks/results/target-v5``) and
the 30-person surveillance card (``benchmarks/results/surveillance30_one_audit.json``). Rows
written before version 3 do not carry ``people`` (the source identities behind a proxy rate); it is
the unit's number of private identities, which every proxy of a release stands for.

Writes ``benchmarks/results/verdict_v3_redecided.{json,md}`` with each release's old and new verdict.

Usage:
    python -m benchmarks.redecide
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

from pfd.audit.rows import rows_from_json
from pfd.audit.verdict import VERSION, decide
from pfd.io import atomic_write_json, atomic_write_text

RESULTS = Path(__file__).parent / "results"
UNITS = RESULTS / "target-v5" / "units"
CARD30 = RESULTS / "surveillance30_one_audit.json"
OUT = RESULTS / "verdict_v3_redecided"


def redecide(rows: list[dict[str, Any]], people: int) -> dict[str, Any]:
    """The verdict of today over committed rows (copied; ``people`` filled in where missing)."""
    fresh = []
    for r in copy.deepcopy(rows):
        for k in ("family", "verdict_95", "deferred_to", "rule_out_multiple", "design_share", "bound_required"):
            r.pop(k, None)
        if r.get("kind") == "rate" and r.get("rule_out") and not r.get("people"):
            r["people"] = people
        if r.get("kind") != "check" and r.get("verdict") in ("unresolved", "LEAKS", "≈ chance") and "verdict_95" not in r:
            r["verdict"] = _nominal(r)
        fresh.append(r)
    v = decide(rows_from_json(fresh))
    return {**v.summary(), "text": v.text, "refusals": [r.label for r in v.refusals]}


def _nominal(row: dict[str, Any]) -> str:
    """A row's own 95 % verdict, as :func:`pfd.audit.contract.summary_row` gave it before ``decide``."""
    from pfd.audit.contract import verdict

    return verdict(row.get("ci95"), float(row.get("chance") or 0.0), p=row.get("p"))


def _releases() -> list[dict[str, Any]]:
    out = []
    for path in sorted(UNITS.glob("*/*.json")):
        doc = json.loads(path.read_text())
        people = len(doc["data"]["private"]["identities"])
        for name, unit in sorted(doc["units"].items()):
            audit = unit.get("audit")
            if not audit or not name.startswith("pfd/"):
                continue
            out.append({"release": f"target-v5 {doc['scenario']} {name}", "people": people,
                        "old": audit["verdict"], "rows": audit["summary"]})
    if CARD30.is_file():
        doc = json.loads(CARD30.read_text())
        for scen, s in doc["scenarios"].items():
            for key, unit in s["units"].items():
                if not key.startswith("pfd/") or "audit" not in unit:
                    continue
                people = len((s.get("data") or {}).get("private", {}).get("identities", [])) or 30
                out.append({"release": f"surveillance30 card {scen} {key}", "people": people,
                            "old": unit["audit"]["verdict"], "rows": unit["audit"]["summary"]})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    records = []
    for rel in _releases():
        new = redecide(rel["rows"], rel["people"])
        old = rel["old"]
        records.append({"release": rel["release"], "people": rel["people"],
                        "old": {"version": old.get("version"), "publishable": old.get("publishable"),
                                "text": old.get("text"),
                                "refusals": old.get("leaks", []) + old.get("unresolved", []) + old.get("failed_checks", [])},
                        "new": new})
    atomic_write_json(args.out.with_suffix(".json"), {"verdict_version": VERSION, "releases": records})
    lines = [f"# Committed pfd releases re-decided under verdict version {VERSION}", "",
             "From each release's committed audit rows (`python -m benchmarks.redecide`); the figures are unchanged, "
             "only the decision step is today's.", "",
             "| release | old verdict | new verdict | rules out (design) | new refusals |", "|---|---|---|---|---|"]
    for r in records:
        o, n = r["old"], r["new"]
        old = f"v{o['version']}: {'publishable' if o['publishable'] else 'refused'}"
        share = (f"{100 * n['rules_out_share']:.1f} % of {n['people']} ({n['rules_out_multiple']:.1f}× chance)"
                 if n.get("rules_out_share") is not None else "-")
        lines.append(f"| {r['release']} | {old} | {'publishable' if n['publishable'] else 'refused'} | {share} | "
                     f"{'; '.join(n['refusals']) or '-'} |")
    atomic_write_text(args.out.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
