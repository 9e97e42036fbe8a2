"""The publication gate: ``pfd distill`` publishes only what the audit calls publishable.

A release is the last thing a run writes, and only when the one audit passes it (DESIGN, *One
audit, one verdict*): :func:`pfd.audit.engine.audit_in_memory` runs every registered
check of :data:`pfd.audit.contract.CHECKS` on the released (uint8) pixels before they are written
(private copies, OGP's margin, the judge's competence, every attack × attacker: the public model,
the publisher's adapted model and the judge), and :func:`pfd.audit.verdict.decide` gives the one
verdict that ``pfd attack`` and ``pfd card`` give on the written release. Nothing here decides:
this module builds the audit's settings from the run's, formats its rows for the summary, and says
why a refused release was refused and what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pfd.audit.rows import AuditRow, rows_from_json
from pfd.errors import REFUSED, PfdError
from pfd import __version__
from pfd.audit.advice import remedy
from pfd.config import AttackConfig, build_config
from pfd.config import config_to_dict
from pfd.data.shape import plain_size
from pfd.distill.methods import get_method
from pfd.release.dataset_card import dataset_card, settings_digest

__all__ = ["PublicationRefused", "audit_config", "format_checks", "refusal_message", "release_card"]


class PublicationRefused(PfdError):
    """The audit refused the release: nothing was published. ``summary`` is the run's ``summary.json``.

    ``pfd distill`` exits with status 3 for it (:attr:`exit_code`), not the 2 of a usage error.
    """

    exit_code = REFUSED

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary or {}


def audit_config(cfg: Any, state_dir: Path) -> Any:
    """The audit's settings for a run's gate: ``pfd attack``'s defaults on the run's private set and state dir.

    Args:
        cfg: The run's :class:`~pfd.config.DistillConfig`.
        state_dir: Its state dir.
    """
    return build_config(AttackConfig, {}, {"private": cfg.private if isinstance(cfg.private, str) else "",
                                           "state_dir": str(state_dir), "report": ""})


def format_checks(rows: Sequence[Mapping[str, Any] | AuditRow]) -> str:
    """One line per gating row, e.g. ``Rank-1 Re-ID (proxies) by public  4.2% (CI 2.0-7.5%, chance 4.2%) ≈ chance``
    (rows as records or as the JSON ``summary.json`` keeps)."""
    lines = []
    for r in rows_from_json(rows):
        if not r.gates:
            continue
        if r.kind == "check":
            lines.append(f"{r.label:<58} {r.verdict}: {r.detail or ''}")
        elif r.kind == "rate" and r.ci95 is not None:
            lo, hi = r.ci95
            lines.append(f"{r.label:<58} {100 * r.value:.1f}% (CI {100 * lo:.1f}-{100 * hi:.1f}%, chance "
                         f"{100 * r.chance:.1f}%) {r.verdict}")
        else:
            p = f", p = {r.p:.2g}" if r.p is not None else ""
            lines.append(f"{r.label:<58} {r.value:.3f} (chance {r.chance:.3f}{p}) {r.verdict}")
    return "\n".join(lines)


def refusal_message(verdict: Any, cfg: Any, state_dir: Path) -> str:
    """The one-line reason a release was not published, with the remedy of its first refusal.

    The remedy is the one table's (:func:`pfd.audit.advice.remedy`), the one ``pfd attack`` and ``pfd card``
    print for the same row; only a method that does not decouple at all is the gate's own case.

    Args:
        verdict: The audit's :class:`~pfd.audit.verdict.Verdict`.
        cfg: The run's :class:`~pfd.config.DistillConfig`.
        state_dir: Where the state is kept (for ``--resume``).
    """
    keep = f"The state is kept in {state_dir}"
    first = verdict.refusals[0] if verdict.refusals else None
    if first is not None and first.kind != "check" and not get_method(cfg.method).decouples:
        fix = (f"--method {cfg.method} does not decouple the proxies from their sources (it is an ablation or "
               "baseline row): use --method pfd")
    elif first is not None:
        fix = remedy(first)
    else:
        fix = "see the audit's rows in summary.json"
    return f"not published: the audit refused it ({verdict.text}). {keep}: {fix}; or pass --resume --allow-linkable to publish anyway"


def release_card(cfg: Any, proxies: Any, source: Any, audit: Mapping[str, Any] | None) -> str:
    """The card of the release a run is about to write (aggregates of ``proxies (n, 3, H, W)`` and
    ``source (n,)``, the run's :class:`~pfd.config.DistillConfig` and the audit's summary)."""
    return dataset_card(num_classes=int(len(np.unique(np.asarray(source)))), num_images=int(len(source)),
                        image_size=plain_size(tuple(proxies.shape[-2:])), method=cfg.method, pfd_version=__version__,
                        settings_digest=settings_digest(config_to_dict(cfg)), license=cfg.release.license, audit=audit,
                        real_images=bool(get_method(cfg.method).real_images))
