"""The audit's rows on fixed releases, to show that a refactoring changed no figure and no verdict.

The four releases of ``tests/audit/test_one_verdict.py`` (at chance, a private photo, a shifted copy,
proxies pushed to their sources) are audited twice, by the gate in memory and by ``pfd attack`` on the
written release, with the code of whichever checkout is first on ``PYTHONPATH``; every row (kind,
n, chance, value, p, interval, verdict) is written to a JSON file. ``compare`` then lists every row
that differs between two such files (issue 52: the audit moved into one package, its rows became a
typed record, and "behaviour does not change" is checked row by row against the filing commit).

Usage:
    python benchmarks/audit_rows.py dump rows-now.json
    git worktree add /tmp/before 64c2c89
    (cd /tmp/before && PYTHONPATH=/tmp/before python "$OLDPWD/benchmarks/audit_rows.py" dump "$OLDPWD/rows-before.json")
    python benchmarks/audit_rows.py compare rows-before.json rows-now.json

Each run trains the suite's two tiny models (about two minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

#: What a row must keep for the audit to be unchanged.
FIELDS = ("kind", "n", "chance", "value", "p", "verdict", "ci95", "gates")


def _row(r: Any) -> dict[str, Any]:
    """A row as JSON: a dict (before issue 52) or an :class:`~pfd.audit.rows.AuditRow`."""
    return r if isinstance(r, dict) else r.as_dict()


def dump(out: Path) -> None:
    """Audit the four releases with this checkout's code; write their rows to ``out``."""
    import torch

    import tests.audit.test_one_verdict as t  # the checkout's own releases and audit calls

    torch.set_num_threads(1)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        world = t.build_world(str(root / "world"))
        for name, (images, source) in t._cases(world).items():
            gate, card, _, _ = t._audit_both(world, root / name.replace(" ", "-"), images, source)
            rows = [{"who": who, "attack": d.get("attack"), "attacker": d.get("attacker"), **{k: d.get(k) for k in FIELDS}}
                    for who, sc in (("gate", gate), ("card", card)) for d in map(_row, sc.rows)]
            result[name] = {"publishable": card.verdict.publishable, "rows": rows}
            print(f"{name}: {len(rows)} rows, publishable {card.verdict.publishable}", flush=True)
    out.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")


def compare(a: Path, b: Path) -> int:
    """Print every release and row that differs between two dumps; return the number of differences."""
    before, now = (json.loads(p.read_text(encoding="utf-8")) for p in (a, b))
    diffs = 0
    for case in sorted(set(before) | set(now)):
        x, y = before.get(case), now.get(case)
        if x is None or y is None:
            print(f"{case}: only in {'the second' if x is None else 'the first'}")
            diffs += 1
            continue
        key = lambda r: (r["who"], r["attack"], r["attacker"])  # noqa: E731
        rx, ry = {key(r): r for r in x["rows"]}, {key(r): r for r in y["rows"]}
        same = x["publishable"] == y["publishable"]
        diffs += not same
        changed = 0
        for k in sorted(set(rx) | set(ry), key=str):
            if k not in rx or k not in ry:
                print(f"  {case}: row {k} only in {'the second' if k not in rx else 'the first'}")
                changed += 1
                continue
            d = {f: (rx[k][f], ry[k][f]) for f in FIELDS if rx[k][f] != ry[k][f]}
            if d:
                print(f"  {case}: {k} {d}")
                changed += 1
        diffs += changed
        print(f"{case}: publishable {x['publishable']} -> {y['publishable']}; {len(rx)} rows, {changed} differ")
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("dump", help="write this checkout's rows").add_argument("out", type=Path)
    c = sub.add_parser("compare", help="rows that differ between two dumps (exit status 1 if any)")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args(argv)
    if args.verb == "dump":
        dump(args.out)
        return 0
    return 1 if compare(args.a, args.b) else 0


if __name__ == "__main__":
    sys.exit(main())
