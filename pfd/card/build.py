"""``pfd card``: a release's privacy-utility card, one resumable run in one folder.

:func:`make_card` answers the publisher's two questions on their own faces:

* **Is it worth anything?** The public model is fine-tuned on the public data without and with
  the release (:mod:`pfd.card.downstream`, the privacy-utility benchmark's protocol, the same
  seeds and schedule on both sides) and both verify the held-out test people; the card reports the
  gain with its identity-bootstrap interval (accuracy, TAR at each FAR) and the ROC curves.
* **Is it safe?** The release scorecard (:func:`pfd.audit.engine.run_scorecard`: every
  registered attack, the same code as ``pfd attack``) with each figure's chance and interval.

The folder (``--out``) holds ``config.toml`` (the resolved settings), ``downstream/<side>/seed<s>/``
(each fine-tune), ``scores/<side>-seed<s>.npy`` (pair scores), ``privacy/`` (the scorecard:
report.json, report.md, report.html), then ``card.json``, ``card.md`` and ``card.html``. Each
step's output is written atomically and kept: ``--resume`` continues after the last finished step,
with the same settings (a different setting is refused with one line, naming it).
"""

from __future__ import annotations

import io
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pfd.attackers.loading import load_attacker
from pfd.attacks.scorecard.report import write_report
from pfd.audit.engine import run_audit
from pfd.card.config import CardConfig
from pfd.card.downstream import (downstream_config, finetune, pair_scores, roc_curve, sample_images, utility_gain,
                                 verification)
from pfd.card.folder import card_folder, check_out
from pfd.card.inputs import CardInputs, open_card_inputs
from pfd.card.render import write_card
from pfd.card.stats import identity_bootstrap_weights
from pfd.config import config_to_dict
from pfd.config.checks import recipe_keys
from pfd.data.faceset import ConcatFaces, to_memory
from pfd.data.pair_sampling import PairsInfo, pair_identities
from pfd.data.pairs import VerificationPairs
from pfd.io import atomic_write_bytes
from pfd.progress import PROGRESS_LOGGER
from pfd.release.state_dir import StateDir

__all__ = ["Card", "make_card", "SIDES"]

log = logging.getLogger(PROGRESS_LOGGER)

#: The two downstream models of each seed.
SIDES = ("public-ft", "with-release")


@dataclass
class Card:
    """What :func:`make_card` produced.

    Attributes:
        data: The ``card.json`` document.
        paths: ``{"json", "markdown", "html"}`` -> written files.
    """

    data: dict[str, Any]
    paths: dict[str, Path] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """The verdict line (privacy, then utility)."""
        return str(self.data["verdict"]["text"])


@dataclass
class PairScores:
    """The verification pairs and every model's scores on them (:func:`_scores`).

    Attributes:
        pairs: The test set's pairs; ``pairs_info`` how many it gave.
        scores: Per side (``public-ft``, ``with-release``), each seed's ``(P,)`` scores.
        base: ``(P,)`` the public model's scores before any fine-tune.
    """

    pairs: VerificationPairs
    pairs_info: PairsInfo
    scores: dict[str, list[np.ndarray]]
    base: np.ndarray


def _scores(cfg: CardConfig, out: Path, inputs: CardInputs, progress: bool) -> PairScores:
    """Every seed's fine-tunes and their test-pair scores (kept; a resumed run skips what is done)."""
    size, e = inputs.size, cfg.eval
    test, pairs, info = inputs.test, inputs.pairs, inputs.pairs_info
    public: Any = None
    release: Any = None
    scores: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}

    def embed_scores(model: Path, path: Path) -> np.ndarray:
        if not path.is_file():
            emb = load_attacker(model, role="downstream", flip=e.flip, progress=progress).embed(test)  # (n, D)
            fresh = pair_scores(emb, pairs)  # (P,)
            atomic_write_bytes(path, _npy(fresh))
            return fresh
        return np.load(path)

    (out / "scores").mkdir(exist_ok=True)
    base = embed_scores(inputs.public_model, out / "scores" / "base.npy")
    for seed in range(cfg.seeds):
        for side in SIDES:
            path = out / "scores" / f"{side}-seed{seed}.npy"
            if not path.is_file():
                if public is None:  # opened once, only when a fine-tune is still to do
                    public = sample_images(ConcatFaces(inputs.public), cfg.downstream.public_images)
                if side == "with-release" and release is None:
                    release = to_memory(inputs.release)
                run = out / "downstream" / side / f"seed{seed}"
                tcfg = downstream_config(cfg.downstream, public_model=inputs.public_model, data=cfg.public, size=size,
                                         out=run, seed=seed, release=side == "with-release")
                t0 = time.perf_counter()
                model = finetune(tcfg, public, release if side == "with-release" else None, progress=progress, resume=True)
                log.info("card: downstream %s seed %d done in %.1f s", side, seed, time.perf_counter() - t0)
                scores[side].append(embed_scores(model, path))
            else:  # done by an earlier (resumed) run
                scores[side].append(np.load(path))
    return PairScores(pairs=pairs, pairs_info=info, scores=scores, base=base)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _utility(cfg: CardConfig, s: PairScores) -> dict[str, Any]:
    e, pairs = cfg.eval, s.pairs
    y = np.asarray(pairs.issame, dtype=bool)
    weights = identity_bootstrap_weights(*pair_identities(pairs), replicates=e.bootstrap, seed=e.seed)
    gain = utility_gain(s.scores["with-release"], s.scores["public-ft"], y, weights, folds=e.folds, fars=e.fars,
                        seed=e.seed)
    per_seed = {side: [verification(sc, y, folds=e.folds, fars=e.fars) for sc in s.scores[side]] for side in SIDES}
    roc = {"base": roc_curve(s.base, y), **{side: roc_curve(s.scores[side][0], y) for side in SIDES}}
    return {"pairs": s.pairs_info, "test_identities": int(len(np.unique(pair_identities(pairs)[0]))),
            "base": verification(s.base, y, folds=e.folds, fars=e.fars), "per_seed": per_seed, "gain": gain,
            "roc": roc, "seeds": cfg.seeds}


def _privacy(cfg: CardConfig, out: Path, inputs: CardInputs) -> dict[str, Any]:
    """The audit (every registered check) on the inputs opened once, written to ``out/privacy``; a finished
    one is kept on --resume."""
    folder = out / "privacy"
    done = folder / "report.json"
    if cfg.resume and done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    with recipe_keys("card."):  # a message naming a setting names the card's key
        card = run_audit(inputs.audit, inputs.configs)
    write_report(card, folder)
    log.info("card: privacy (every registered attack) done in %.1f s", time.perf_counter() - t0)
    return json.loads(done.read_text(encoding="utf-8"))


def _gate(state_dir: str) -> dict[str, Any] | None:
    path = StateDir.at(state_dir).summary
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("gate")
    except (OSError, ValueError):
        return None


def verdict(privacy: dict[str, Any], utility: dict[str, Any]) -> dict[str, Any]:
    """The card's verdict: the audit's (:func:`pfd.audit.verdict.decide`, the one ``pfd distill``'s gate and
    ``pfd attack`` take), then the gain.

    Returns:
        ``{"publishable", "text", "privacy": {...}, "utility": {"diff", "ci95", "text"}}``.
    """
    p = dict(privacy.get("verdict") or {"publishable": None, "text": "no check ran"})  # the audit's own
    acc = utility["gain"]["accuracy"]
    d, (lo, hi) = 100 * acc["diff"], (100 * acc["ci95"][0], 100 * acc["ci95"][1])
    worth = f"worth {d:+.1f} ({lo:+.1f}, {hi:+.1f}) points of verification accuracy on your test people"
    if not (lo > 0 or hi < 0):
        worth += " (not distinguishable from no gain)"
    elif hi < 0:
        worth += " (a loss)"
    return {"publishable": p["publishable"], "text": f"{p['text']}; {worth}", "privacy": p,
            "utility": {"diff": acc["diff"], "ci95": acc["ci95"], "text": worth}}


def make_card(cfg: CardConfig, *, progress: bool = True) -> Card:
    """Build a release's privacy-utility card (module docstring) and write it into ``cfg.out``.

    Args:
        cfg: The card's settings.
        progress: Progress bars (a line per stage where stderr is not a terminal).

    Returns:
        The :class:`Card` (its ``data`` is card.json).

    Raises:
        PfdError: Bad or mismatched inputs, a foreign or busy ``--out``, or ``--resume`` with other settings;
            each before any work.
    """
    out = Path(cfg.out).expanduser()
    check_out(cfg, out)
    inputs = open_card_inputs(cfg, progress=progress)
    with card_folder(cfg, out, inputs) as hashes:
        # Privacy first: a setting under which an audit test could never flag (issue 34: permutations = 1)
        # is refused before the fine-tunes, and --resume with the corrected setting continues.
        t0 = time.perf_counter()
        privacy = _privacy(cfg, out, inputs)
        t1 = time.perf_counter()
        scores = _scores(cfg, out, inputs, progress)
        utility = _utility(cfg, scores)
        t2 = time.perf_counter()
        data = {"format": "pfd-card", "version": 1, "verdict": verdict(privacy, utility), "utility": utility,
                "privacy": privacy, "gate": _gate(cfg.state_dir), "settings": config_to_dict(cfg),
                "hashes": hashes, "timings": {"privacy": round(t1 - t0, 1), "utility": round(t2 - t1, 1)}}
        paths = write_card(data, out)
    return Card(data=data, paths=paths)
