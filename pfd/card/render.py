"""Write a card: ``card.json`` (every figure), ``card.md`` (the verdict and the tables) and
``card.html`` (one self-contained page: the verdict first, then the evidence).

The page is :func:`pfd.attacks.scorecard.html.page` (CSS inline, plots as ``data:`` PNGs, a
Content-Security-Policy that forbids every fetch) holding, in order: the verdict; **utility** (the
gain with its interval per metric, each side's figures, the verification ROC of the public model,
public-ft and with-release on log FAR); **privacy** (the scorecard's parts: the summary table,
linkage bars with chance and intervals, the source-rank histogram, membership ROC on log axes,
the per-identity risk table, the match grid); **settings and hashes**.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pfd.io import atomic_write_json, atomic_write_text, jsonable
import html
from pfd.attacks.scorecard.html import esc, page, privacy_sections
from pfd.attacks.scorecard.html import figure_img
from pfd.attacks.scorecard.report import summary_table
from pfd.audit.advice import refusal_advice
from pfd.audit.rows import rows_from_json

__all__ = ["write_card", "card_markdown", "card_html"]

_SIDES = {"base": "public model", "public-ft": "public-ft (public data)", "with-release": "with release (public data + release)"}




def md_text(text: Any) -> str:
    """A user-supplied name (an identity folder) as inert Markdown text: a Markdown viewer renders raw
    HTML, so ``<img src=x onerror=...>`` as a folder name ran in it (issue 34); markup characters are
    escaped too."""
    out = html.escape(str(text), quote=False)
    return "".join("\\" + ch if ch in "\\`*_[]|#" else ch for ch in out)

def flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted key, text)`` of a nested settings or hashes dict, for the page (no Python reprs)."""
    out: list[tuple[str, str]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out += flat(v, f"{key}.") if v else [(key, "-")]
        elif isinstance(v, (list, tuple)):
            out.append((key, ", ".join(str(x) for x in v) if v else "-"))
        else:
            out.append((key, "-" if v in ("", None) else str(v)))
    return out

def _ok(v: Any) -> bool:
    """A finite number (card.json writes an unresolvable figure, nan, as null)."""
    return v is not None and bool(np.isfinite(v))


def _pts(d: Mapping[str, Any]) -> str:
    lo, hi = d["ci95"]
    if not (_ok(d["diff"]) and _ok(lo) and _ok(hi)):
        return "n/a (too few impostor pairs)" if not _ok(d["diff"]) else f"{100 * d['diff']:+.1f}"
    return f"{100 * d['diff']:+.1f} ({100 * lo:+.1f}, {100 * hi:+.1f})"


def _metric(v: Any) -> str:
    return f"{100 * v:.1f}%" if _ok(v) else "n/a"


def _utility_rows(u: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, public-ft mean, with-release mean, gain with interval) per metric."""
    rows = []
    for key, g in u["gain"].items():
        name = "accuracy" if key == "accuracy" else key.replace("tar@far=", "TAR @ FAR ")
        rows.append((name, _metric(g["ref_mean"]), _metric(g["row_mean"]), _pts(g)))
    return rows


def card_markdown(data: Mapping[str, Any]) -> str:
    """The ``card.md`` text."""
    u, p = data["utility"], data["privacy"]
    out = ["# pfd card", "", f"**{data['verdict']['text']}**", "", "## Utility", "",
           f"{u['seeds']} seed(s) per side; {u['pairs']['used']} genuine + {u['pairs']['used']} impostor pairs of "
           f"{u['test_identities']} test people; intervals: 95 % identity bootstrap (test people resampled, seeds drawn "
           "per replicate).", "", "| metric | public-ft | with release | gain, points (95% CI) |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _utility_rows(u)]
    out += ["", f"The public model alone: accuracy {_metric(u['base']['accuracy'])}.", "", "## Privacy", ""]
    rows = rows_from_json(p.get("summary"))
    out += summary_table(rows) if rows else ["No attack could run."]

    hints = refusal_advice(rows)
    if hints:
        out += ["", "What the refusals mean:", ""]
        out += [f"- {md_text(a['row'])}: {md_text(a['gain'])}. What to do: {md_text(a['remedy'])}." for a in hints]
    risk = p.get("per_identity") or []
    if risk:
        out += ["", "Most linkable identities (most links by any row / at chance / nearest photo for):", ""]
        out += [f"- {md_text(r['identity'])}: {r['worst']} of {r['proxies']} proxies ({r['worst_row']}) / {r['chance_hits']:.2f} / "
                f"{r['nearest_for']} proxies" + (f" ({md_text(r['nearest_by'])})" if r.get("nearest_by") else "")
                for r in risk[:5]]
    gate = data.get("gate")
    if gate is not None:
        out += ["", f"Publication gate at distillation: {'passed' if gate.get('passed') else 'refused'}."]
    out += ["", "## Settings and hashes", ""] + [f"- {k}: `{v}`" for k, v in flat(data["hashes"])]
    out += ["", "The full page: card.html; every figure: card.json; the attack report: privacy/report.md.", ""]
    return "\n".join(out)


def _roc_plot(u: Mapping[str, Any]) -> str:
    from matplotlib.figure import Figure


    fig = Figure(figsize=(5.6, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    for side, colour in (("base", "#9e9e9e"), ("public-ft", "#5c6bc0"), ("with-release", "#2e7d32")):
        c = u["roc"].get(side) or {}
        if c.get("far"):
            ax.step(c["far"], c["tar"], where="post", color=colour, label=_SIDES[side])
    ax.set_xscale("log")
    ax.set_xlim(left=max(1e-4, min([min(c["far"]) for c in u["roc"].values() if c.get("far")] + [1e-3])))
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("false-accept rate (test impostor pairs)")
    ax.set_ylabel("true-accept rate")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    return figure_img(fig, "verification ROC with and without the release")


def card_html(data: Mapping[str, Any], privacy_folder: Path | None = None) -> str:
    """The self-contained ``card.html``."""
    v, u, p = data["verdict"], data["utility"], data["privacy"]
    cls = {True: "ok", False: "bad", None: "neutral"}[v["publishable"]]
    rows = "".join(f"<tr><td>{esc(a)}</td><td class=num>{esc(b)}</td><td class=num>{esc(c)}</td>"
                   f"<td class=num>{esc(d)}</td></tr>" for a, b, c, d in _utility_rows(u))
    parts = ["<h1>pfd privacy-utility card</h1>",
             f'<div class="verdict {cls}" id="verdict">{esc(v["text"])}</div>',
             "<h2>Utility on your test people</h2>",
             f"<p>{u['seeds']} seed(s) per side; {u['pairs']['used']} genuine + {u['pairs']['used']} impostor pairs of "
             f"{u['test_identities']} test people. The public model alone: accuracy {esc(_metric(u['base']['accuracy']))}."
             "</p>",
             "<table><tr><th>metric</th><th>public-ft</th><th>with release</th><th>gain, points (95% CI)</th></tr>"
             f"{rows}</table>", _roc_plot(u),
             '<p class="muted">Gain: with-release minus public-ft, averaged over seeds; interval: 95 % identity '
             "bootstrap (the test people resampled, each side's seeds drawn per replicate).</p>",
             "<h1>Privacy</h1>"]
    parts += privacy_sections(p, rows_from_json(p.get("summary")), privacy_folder)
    gate = data.get("gate")
    if gate is not None:
        parts.append(f"<p>Publication gate at distillation: <b>{'passed' if gate.get('passed') else 'refused'}</b>.</p>")
    parts += ["<h2>Settings and hashes</h2>",
              "<table>" + "".join(f"<tr><th>{esc(k)}</th><td><code>{esc(h)}</code></td></tr>"
                                  for k, h in flat(data["hashes"])) + "</table>",
              "<table>" + "".join(f"<tr><th>{esc(k)}</th><td><code>{esc(s)}</code></td></tr>"
                                  for k, s in flat(data["settings"])) + "</table>"]
    return page("pfd privacy-utility card", parts)


def write_card(data: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """Write ``card.json``, ``card.md`` and ``card.html`` into ``out`` (each atomically).

    Returns:
        ``{"json", "markdown", "html"}`` -> written paths.
    """
    doc = jsonable(dict(data))
    atomic_write_json(out / "card.json", doc)
    atomic_write_text(out / "card.md", card_markdown(doc))
    atomic_write_text(out / "card.html", card_html(doc, out / "privacy"))
    return {"json": out / "card.json", "markdown": out / "card.md", "html": out / "card.html"}
