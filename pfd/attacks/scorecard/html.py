"""``report.html``: the scorecard as one self-contained page (and the parts ``pfd card`` reuses).

The page holds everything it shows: CSS inline, every plot a PNG embedded as a ``data:`` URI, no
script or font from anywhere, and a Content-Security-Policy that forbids any fetch (``default-src
'none'``; images only from ``data:``), so it reads offline, prints, and can be mailed as one file.
One inline script only marks, in ``<body data-images>``, how many of its images decoded once the page
has loaded (what
the browser test reads).

Parts (each returns HTML text):

* :func:`privacy_verdict`: the audit's verdict (:func:`pfd.audit.verdict.decide`), as the page shows it;
* :func:`summary_html`: the summary table (attack, attacker, success, chance, interval, verdict);
* :func:`link_bars`: each linkage rate as a bar with its 95 % interval and its chance level;
* :func:`rank_histogram`: where each proxy's source ranks among the private identities, per attacker;
* :func:`membership_roc`: the membership statistics' ROC on log axes down to 1e-3 FPR;
* :func:`risk_table`: the per-identity risk table (:mod:`pfd.audit.risk`), most linkable first;
* :func:`page`: the document around them.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pfd.audit.contract import ordered_checks
from pfd.audit.rows import AuditRow
from pfd.audit.advice import refusal_advice

__all__ = ["page", "figure_img", "png_img", "privacy_verdict", "summary_html", "advice_html", "link_bars", "rank_histogram",
           "membership_roc", "risk_table", "report_html", "esc"]

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;max-width:980px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{padding:12px 16px;border-radius:8px;font-size:16px;margin:12px 0}
.ok{background:#e8f5e9;border:1px solid #66bb6a}.bad{background:#ffebee;border:1px solid #e57373}
.neutral{background:#f5f5f5;border:1px solid #bbb}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}
th{background:#fafafa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.leak{color:#b71c1c;font-weight:600}.muted{color:#666}img.plot{max-width:100%;display:block;margin:8px 0}
@media print{body{max-width:none}h2{break-after:avoid}img.plot{break-inside:avoid}}
"""
_SCRIPT = ("window.addEventListener('load',function(){var im=document.images,ok=0;"
           "for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0)ok++;}"
           "document.body.setAttribute('data-images',ok+'/'+im.length);});")
_DPI = 90


def esc(x: Any) -> str:
    """HTML-escaped text of any value."""
    return html.escape(str(x), quote=True)


def png_img(png: bytes, alt: str) -> str:
    """An ``<img>`` holding ``png`` as a data URI."""
    return f'<img class="plot" alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def figure_img(fig: Figure, alt: str) -> str:
    """A matplotlib figure as an embedded ``<img>``."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    return png_img(buf.getvalue(), alt)


def page(title: str, parts: Sequence[str]) -> str:
    """The self-contained document: CSP, inline CSS, the parts in order."""
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_CSS}</style><script>{_SCRIPT}</script></head>\n"
            f'<body data-images="pending">\n{body}\n</body></html>\n')


def _pct(v: float, digits: int = 1) -> str:
    return f"{100 * v:.{digits}f}%"


def privacy_verdict(verdict: Mapping[str, Any] | None) -> dict[str, Any]:
    """The privacy half's verdict as the page shows it: the audit's own (:func:`pfd.audit.verdict.decide`).

    Args:
        verdict: ``report.json``'s ``verdict`` (:meth:`pfd.audit.verdict.Verdict.as_dict`), or ``None``
            when no check ran.

    Returns:
        ``{"publishable": bool | None, "text": str, ...}`` (the verdict's fields).
    """
    if not verdict:
        return {"publishable": None, "text": "no check ran"}
    return dict(verdict)


def _fmt_value(r: AuditRow) -> str:
    return f"{r.value:.3f}" if r.kind != "rate" else _pct(r.value)


def _fmt_chance(r: AuditRow) -> str:
    return f"{r.chance:.3f}" if r.kind != "rate" else _pct(r.chance)


def summary_html(rows: Sequence[AuditRow]) -> str:
    """The summary table."""
    out = ["<table><tr><th>attack</th><th>attacker</th><th>success</th><th>chance</th><th>95% CI / p</th>"
           "<th>verdict</th></tr>"]
    for r in rows:
        if r.kind == "check":  # a pass/fail check: what it found
            cls = ' class="leak"' if not r.passed else ""
            out.append(f"<tr><td>{esc(r.attack)}</td><td>-</td><td colspan=3>{esc(r.detail or '')}</td>"
                       f"<td{cls}>{esc(r.verdict)}</td></tr>")
            continue
        if r.kind == "rate":
            succ = f"{_pct(r.value)} ({'?' if r.count is None else r.count}/{'?' if r.n is None else r.n})"
        else:
            succ = _fmt_value(r)
        if r.ci95:
            lo, hi = r.ci95
            ci = f"{_pct(lo)}–{_pct(hi)}" if r.kind == "rate" else f"{lo:.3f}–{hi:.3f}"
            if r.p is not None:
                ci += f", p = {r.p:.3g}"
        else:
            ci = f"p = {float('nan') if r.p is None else r.p:.3g}"
        cls = ' class="leak"' if r.verdict in ("LEAKS", "unresolved") else ""
        out.append(f"<tr><td>{esc(r.attack)}</td><td>{esc(r.attacker)}</td><td class=num>{esc(succ)}</td>"
                   f"<td class=num>{esc(_fmt_chance(r))}</td><td class=num>{esc(ci)}</td>"
                   f"<td{cls}>{esc(r.verdict)}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def link_bars(rows: Sequence[AuditRow]) -> str:
    """Every linkage rate as a bar with its 95 % interval and a tick at its chance level ('' if none)."""
    rates = [r for r in rows if r.kind == "rate" and r.ci95]
    if not rates:
        return ""
    n = len(rates)
    fig = Figure(figsize=(8.0, 0.32 * n + 1.0))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(n)[::-1]
    vals = np.array([100 * r.value for r in rates])
    lo = np.array([100 * r.ci95[0] for r in rates])  # type: ignore[index]
    hi = np.array([100 * r.ci95[1] for r in rates])  # type: ignore[index]
    colours = ["#c62828" if r.verdict in ("LEAKS", "unresolved") else "#5c6bc0" for r in rates]
    ax.barh(y, vals, color=colours, height=0.6, alpha=0.85)
    ax.errorbar(vals, y, xerr=[vals - lo, hi - vals], fmt="none", ecolor="black", capsize=3, lw=1)
    ax.scatter([100 * r.chance for r in rates], y, marker="|", s=260, color="#e65100", zorder=3, label="chance")
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r.attack} · {r.attacker}" for r in rates], fontsize=8)
    ax.set_xlabel("linked proxies (%), 95% interval clustered by source identity")
    ax.set_xlim(0, max(float(hi.max()), 100 * max(r.chance for r in rates)) * 1.1 + 0.5)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return figure_img(fig, "linkage bars with chance and intervals")


def rank_histogram(tests: Sequence[Mapping[str, Any]]) -> str:
    """The source's rank histogram against uniform, one panel per attacker ('' without tests)."""
    tests = [t for t in tests if t.get("histogram")]
    if not tests:
        return ""
    fig = Figure(figsize=(3.2 * len(tests), 2.6))
    for i, t in enumerate(tests):
        ax = fig.add_subplot(1, len(tests), i + 1)
        h, e = np.asarray(t["histogram"]), np.asarray(t["expected"])
        x = np.arange(len(h))
        ax.bar(x, h, color="#5c6bc0", alpha=0.85)
        ax.step(np.r_[x - 0.5, x[-1] + 0.5], np.r_[e, e[-1]], where="post", color="#e65100", label="uniform")
        ax.set_title(f"{t['attacker']}{' (|cos|)' if t.get('by') == 'abs' else ''}: p = {t['p']:.3g}", fontsize=9)
        ax.set_xlabel("source rank (nearest → farthest)", fontsize=8)
        ax.set_xticks([])
        if i == 0:
            ax.set_ylabel("proxies", fontsize=8)
            ax.legend(fontsize=7)
    return figure_img(fig, "source rank histogram")


def membership_roc(mem: Mapping[str, Any]) -> str:
    """Membership ROC of each statistic on log-log axes down to 1e-3 FPR ('' without statistics)."""
    stats = {k: v for k, v in (mem.get("statistics") or {}).items() if isinstance(v, Mapping) and v.get("roc")}
    if not stats:
        return ""
    fig = Figure(figsize=(4.6, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    for name, s in stats.items():
        fpr, tpr = np.maximum(np.asarray(s["roc"]["fpr"]), 1e-3), np.maximum(np.asarray(s["roc"]["tpr"]), 1e-3)
        ax.step(fpr, tpr, where="post", label=f"{name} (AUC {s.get('auc', float('nan')):.3f})")
    g = np.geomspace(1e-3, 1, 50)
    ax.plot(g, g, "--", color="grey", lw=1, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-3, 1)
    ax.set_ylim(1e-3, 1.05)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    return figure_img(fig, "membership ROC, log axes")


def risk_table(rows: Sequence[Mapping[str, Any]], *, limit: int = 15) -> str:
    """The per-identity risk table, most linkable first ('' without rows)."""
    if not rows:
        return ""
    out = ["<table><tr><th>identity</th><th>proxies</th><th>most links (row)</th><th>at chance</th>"
           "<th>nearest private photo for</th></tr>"]
    for r in list(rows)[:limit]:
        cls = ' class="leak"' if r["worst"] > max(2 * r["chance_hits"], 1) else ""
        out.append(f"<tr><td>{esc(r['identity'])}</td><td class=num>{r['proxies']}</td>"
                   f"<td class=num{cls}>{r['worst']} ({esc(r['worst_row'])})</td>"
                   f"<td class=num>{r['chance_hits']:.2f}</td><td class=num>{r['nearest_for']} proxies{_by(r)}</td></tr>")
    out.append("</table>")
    if len(rows) > limit:
        out.append(f'<p class="muted">{len(rows) - limit} more identities in the JSON.</p>')
    return "\n".join(out)


def _by(r: Mapping[str, Any]) -> str:
    """Whose nearest-photo count it is (`` (judge)``), when the row says."""
    return f" ({esc(r['nearest_by'])})" if r.get("nearest_by") else ""


def _setup(data: Mapping[str, Any]) -> str:
    rel, priv = data.get("release", {}), data.get("private", {})
    items = [f"release <code>{esc(rel.get('path'))}</code>: method {esc(rel.get('method'))}, "
             f"{rel.get('num_classes')} classes, {rel.get('num_images')} images",
             f"private set <code>{esc(priv.get('spec'))}</code>: {priv.get('identities')} identities, "
             f"{priv.get('images')} images"]
    items += [f"attacker {esc(a['role'])}: <code>{esc(a['path'])}</code> ({esc(a['kind'])}, D = {a['embedding_dim']})"
              for a in data.get("attackers", [])]
    items += [f"skipped {esc(k)}: {esc(v)}" for k, v in (data.get("skipped") or {}).items()]
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def advice_html(rows: Sequence[AuditRow]) -> str:
    """Each refusing row: what an attacker gains and what the publisher can do ('' when none refuses)."""
    items = refusal_advice(rows)
    if not items:
        return ""
    body = "".join(f"<tr><td>{esc(a['row'])}</td><td>{esc(a['gain'])}</td><td>{esc(a['remedy'])}</td></tr>" for a in items)
    return f"<table><tr><th>refusing row</th><th>what an attacker gains</th><th>what to do</th></tr>{body}</table>"


def privacy_sections(data: Mapping[str, Any], rows: Sequence[AuditRow], folder: Path | None = None) -> list[str]:
    """The privacy half's sections (summary, bars, ranks, membership, per-identity risk, grid, setup)."""
    parts = ["<h2>Linkage</h2>", summary_html(rows), link_bars(rows),
             '<p class="muted">Verdicts are the audit\'s, family-wise (pfd.audit.verdict): LEAKS: a rate lies above '
             "chance, or a test\'s p-value is small, at the audit\'s level split over every figure; unresolved: the "
             "audit\'s design (its number of people) cannot rule out 30 % of the people nor 5× chance, whatever the "
             "proxies. Intervals shown are 95%, clustered by source "
             "identity; chance comes from the gallery's composition.</p>"]
    hints = advice_html(rows)
    if hints:
        parts += ["<h2>What the refusals mean</h2>", hints]
    for check in ordered_checks():  # each check's own section, in the order the audit ran them
        parts += check.page(data)
    risk = risk_table(data.get("per_identity") or [])
    if risk:
        parts += ["<h2>Per-identity risk</h2>", risk,
                  '<p class="muted">Each private person whose photos were a proxy\'s source: the most of their '
                  "proxies linked to them by any row, what chance gives, and for how many proxies of anyone one of "
                  "their photos is the nearest (a hub takes far more than its share).</p>"]
    grid = folder / "matches.png" if folder is not None else None
    if grid is not None and grid.is_file():
        parts += ["<h2>Proxies and their nearest private photos</h2>", png_img(grid.read_bytes(), "match grid")]
    parts += ["<h2>Setup</h2>", _setup(data)]
    return parts


def report_html(data: Mapping[str, Any], rows: Sequence[AuditRow], folder: Path | None = None) -> str:
    """``report.html`` of ``pfd attack``: the privacy verdict first, then the evidence."""
    v = privacy_verdict(data.get("verdict"))
    cls = {True: "ok", False: "bad", None: "neutral"}[v["publishable"]]
    head = ["<h1>pfd attack scorecard</h1>", f'<div class="verdict {cls}" id="verdict">{esc(v["text"])}</div>']
    return page("pfd attack scorecard", head + privacy_sections(data, rows, folder))
