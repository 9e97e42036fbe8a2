"""Write a scorecard: ``report.json`` (everything), ``report.md`` (one table first), PNG plots and
``report.html`` (one self-contained page, :mod:`pfd.attacks.scorecard.html`).

The summary table has one row per figure, each rendered by its attack's result
(:meth:`pfd.audit.contract.CheckResult.rows`)::

    | attack | attacker | success | chance | 95% CI | verdict |

``verdict`` (:func:`pfd.audit.contract.verdict`) says whether the figure is a leak at the 5 %
level, with a rule whose false-LEAKS rate under the null is tested by simulation
(``tests/attacks/test_null_calibration.py``):

* **rates** (linkability, its hubness-corrected form, rank-last): **LEAKS** when the whole 95 %
  interval lies above chance. The interval is the exact binomial interval at the effective sample
  size of the proxies, clustered by source identity (:func:`pfd.audit.intervals.clustered_interval`);
  chance comes from the gallery's composition (:func:`pfd.audit.intervals.composition_chance`).
* **tests** (attributes, the source-rank uniformity, membership): **LEAKS** when the test's
  p-value is <= 0.05; the interval shown is descriptive. Membership is **inconclusive** instead
  of LEAKS when the reference model (the public one) already separates members from non-members.

Otherwise **≈ chance** (or **below chance** when a rate's interval lies below it). Each row is a
separate test at the 5 % level, so with a dozen rows one "LEAKS" at the edge can be luck; the
detail sections give counts, p-values and settings.

``report.json`` layout: ``{"format": "pfd-attack-report", "version": 1, "summary": [rows],
"settings", "release", "private", "attackers", "linkability", "hubness", "source_rank",
"reconstruction", "attributes", "membership", "per_identity", "skipped", "timings", "plots"}``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from pfd.audit.rows import AuditRow
from pfd.io import atomic_write_json, atomic_write_text, jsonable
from pfd.attacks.plots import plot_match_grid
from pfd.attacks.scorecard.html import report_html

__all__ = ["jsonable", "summary_table", "format_markdown", "write_report"]


def _fmt(row: AuditRow, value: float) -> str:
    return f"{value:.3f}" if row.kind == "auc" else f"{100 * value:.1f}%"


def _success(row: AuditRow) -> str:
    if row.kind == "rate":
        return f"{_fmt(row, row.value)} ({row.count}/{row.n})"
    if "tpr_at_1pct_fpr" in row.extra:
        flags = ["" if ok else "*" for ok in row.extra.get("tpr_resolvable", [True, True])]
        return (f"AUC {_fmt(row, row.value)}; TPR {row.extra['tpr_at_1pct_fpr']:.3f}{flags[0]} @1% / "
                f"{row.extra['tpr_at_01pct_fpr']:.3f}{flags[1]} @0.1% FPR")
    return _fmt(row, row.value)


def _ci(row: AuditRow) -> str:
    if row.ci95 is None:  # a test: its p-value, and the statistic's null quantile where the test has one
        null = f" (null 95%: {row.null95:.3f})" if row.null95 is not None else ""
        return f"p = {float('nan') if row.p is None else row.p:.3g}{null}"
    lo, hi = row.ci95
    text = f"[{lo:.3f}, {hi:.3f}]" if row.kind == "auc" else f"[{100 * lo:.1f}, {100 * hi:.1f}]%"
    return f"{text}, p = {row.p:.3g}" if row.p is not None else text


def summary_table(rows: Sequence[AuditRow]) -> list[str]:
    """The summary rows as markdown table lines (attack | attacker | success | chance | 95% CI | verdict)."""
    out = ["| attack | attacker | success | chance | 95% CI | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        v = f"**{r.verdict}**" if r.verdict in ("LEAKS", "unresolved", "FAILED") else r.verdict
        if r.kind == "check":
            out.append(f"| {r.attack} | - | {r.detail or ''} | | | {v} |")
            continue
        out.append(f"| {r.attack} | {r.attacker} | {_success(r)} | {_fmt(r, r.chance)} | {_ci(r)} | {v} |")
    return out


def _size_words(size: Any) -> str:
    """``32`` or ``112x96`` (height x width) of a manifest image size."""
    return f"{size[0]}x{size[1]}" if isinstance(size, (list, tuple)) else str(size)


def _setup_section(data: Mapping[str, Any]) -> list[str]:
    rel, priv = data["release"], data["private"]
    out = ["## Setup", "",
           f"- Release `{rel['path']}`: method `{rel['method']}`, {rel['num_classes']} classes, "
           f"{rel['num_images']} images of {_size_words(rel['image_size'])} px.",
           f"- Private set `{priv['spec']}`: {priv['identities']} identities ({priv['source_identities']} of them "
           f"sources of proxies), {priv['images']} images. Linkability chance: "
           "Σ over identities of (share of proxies) × (share of the gallery: images for VisMatch, templates "
           f"for Re-ID); 1/{priv['identities']} = {100 / priv['identities']:.2f}% when balanced.",
           "", "| attacker | model | kind | input | D | distance |", "|---|---|---|---|---|---|"]
    for a in data["attackers"]:
        conv = a.get("convention")
        inp = f"{_size_words(a['size'])} px"
        if conv:  # an outside attacker: its own input convention
            h, w = conv["size"]
            inp = (f"{h}×{w} {conv['resize']}, {conv['channels'].upper()}, (x − {_num(conv['mean'])}) / "
                   f"{_num(conv['std'])}")
        out.append(f"| {a['role']} | `{a['path']}` | {a['kind']} | {inp} | {a['embedding_dim']} | "
                   f"{a.get('distance', 'cosine')} |")
    return out


def _num(v: Any) -> str:
    vals = list(v) if isinstance(v, (list, tuple)) else [v]
    return f"{vals[0]:g}" if len(set(vals)) == 1 else "(" + ", ".join(f"{x:g}" for x in vals) + ")"


def format_markdown(data: Mapping[str, Any], rows: Sequence[AuditRow], plots: Mapping[str, str],
                    sections: list[str] = ()) -> str:
    """The ``report.md`` text: the summary table first, then the setup and each attack's section."""
    out = ["# pfd attack scorecard", ""]
    v = data.get("verdict") or {}
    if v:
        out += [f"**Verdict: {v['text']}**", ""]
    out += summary_table(rows) if rows else ["No attack could run; see Skipped."]
    per = f"{v['per_figure']:.2g}" if v else "level / m"
    out += ["", f"Verdicts are the audit's, family-wise at {100 * v.get('level', 0.01):g} % over {v.get('figures', 'm')} "
            f"figures (pfd.audit.verdict): LEAKS: a rate's exact interval at confidence 1 − {per} (clustered by source "
            f"identity) lies above chance, or a test (attributes, the source's rank, membership) gives p <= {per}; "
            "unresolved: the audit's design (its number of people) cannot rule out "
            f"{100 * v.get('bound', 0.3):g} % of the people nor {v.get('rule_out', 5):g}× chance; ≈ chance: neither. "
            "The intervals shown are 95%. "
            "* TPR at FPR 0: fewer non-members than 1/FPR.", ""]
    out += _setup_section(data) + list(sections)
    if data.get("skipped"):
        out += ["", "## Skipped", ""] + [f"- {k}: {v}" for k, v in data["skipped"].items()]
    if plots:
        out += ["", "## Plots", ""] + [f"- [{k}]({v})" for k, v in plots.items()]
    t = data.get("timings", {})
    out += ["", "## Timings", "", ", ".join(f"{k} {v:.1f} s" for k, v in t.items()) or "-", ""]
    return "\n".join(out)


def write_report(card: Any, out: str | os.PathLike) -> dict[str, Path]:
    """Write ``report.json``, ``report.md``, ``report.html`` and the plots of a scorecard into ``out``.

    Args:
        card: A :class:`pfd.audit.engine.Scorecard`.
        out: The report folder (created).

    Returns:
        ``{"json", "markdown", "html", <plot name>...}`` -> written paths.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    data = dict(card.data)
    plots: dict[str, str] = {}
    grid = card.grid
    if grid is not None:
        title = "Proxies and their nearest private images (public model)"
        if grid.hub is not None:
            h = grid.hub
            title += (f"\none photo of {h.identity} is the nearest in {h.rows} of {h.of} rows: a hub "
                      "(near every proxy), not a link")
        plot_match_grid(grid.columns(), folder / "matches.png", success=grid.success, title=title)
        plots["matches"] = "matches.png"
    sections: list[str] = []
    for result in card.results.values():
        plots.update(result.plots(folder))
        sections += result.markdown()
    rows = card.rows
    data["plots"] = plots
    atomic_write_text(folder / "report.md", format_markdown(data, rows, plots, sections))

    atomic_write_text(folder / "report.html", report_html(data, rows, folder))
    # report.json last: it marks the report done (pfd card --resume keeps a finished one), so a run
    # killed before it redoes the whole report instead of leaving report.html unwritten (issue 34).
    atomic_write_json(folder / "report.json", jsonable({"summary": data["summary"], **data}))
    return {"json": folder / "report.json", "markdown": folder / "report.md", "html": folder / "report.html",
            **{k: folder / v for k, v in plots.items()}}
