"""A card's folder (``--out``): claimed for one run, begun, or resumed with the same settings and inputs.

A card is one resumable run in one folder (:mod:`pfd.card.build`). Before any work the folder is
claimed (pfd's own or new, one writer at a time), its settings compared with the ``config.toml`` it
holds (:func:`_claim`: a setting that changes a figure refuses ``--resume``; one only the audit reads
redoes the audit and keeps the fine-tunes) and its inputs by *content* with its ``inputs.json``
(:func:`_hashes`, :func:`_check_inputs`: issue 34, a release distilled again into the same folder kept
the old figures under the new release's hash). A run that an input or setting error stopped before
any fine-tune or audit finished leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Iterator, TypedDict

from pfd.attacks.report_folder import check_apart, report_folder
from pfd.card.config import CardConfig
from pfd.card.inputs import CardInputs, DataDigests
from pfd.config import config_to_dict, dump_toml, load_recipe
from pfd.errors import PfdError
from pfd.io import atomic_write_text
from pfd.progress import PROGRESS_LOGGER
from pfd.release.format import MANIFEST

__all__ = ["CARD_ENTRIES", "InputHashes", "card_folder", "check_out"]

log = logging.getLogger(PROGRESS_LOGGER)

#: Everything a card run writes into its folder (anything else makes the folder foreign).
CARD_ENTRIES = frozenset({"config.toml", "inputs.json", "downstream", "scores", "privacy", "card.json", "card.md", "card.html",
                          ".pfd-report-lock"})
#: Settings that may change between a run and its --resume (they do not change a figure).
_FREE = ("resume", "out", "threads", "skip_bad")
#: Inputs named by a path: a --resume compares what they hold (``inputs.json``), not how they are spelt.
_CONTENT = ("release", "state_dir", "private", "public_model", "public", "test", "holdout")
#: Inputs only the privacy half reads: a --resume after they changed redoes the audit and keeps the fine-tunes.
_PRIVACY_ONLY = ("attack", "holdout")


def _settings(cfg: CardConfig) -> dict[str, Any]:
    return {k: v for k, v in config_to_dict(cfg).items() if k not in _FREE}


def _claim(cfg: CardConfig, out: Path) -> set[str]:
    """A new folder, or a card's with ``--resume`` and the same settings (checked before any work).

    Returns:
        The settings only the privacy half reads that changed (its audit is redone, the fine-tunes kept).
    """
    saved = out / "config.toml"
    if not saved.is_file():
        return set()
    if not cfg.resume:
        raise PfdError(f"{out}: holds a card already; pass --resume to continue it (same settings) or choose another --out")
    before = load_recipe(saved).get("card", {})
    now = json.loads(json.dumps(_settings(cfg)))
    stale = set()
    for key in sorted(set(before) | set(now)):
        if key in _FREE or key in _CONTENT:
            continue
        if json.loads(json.dumps(before.get(key))) != now.get(key):
            if key in _PRIVACY_ONLY:
                stale.add(key)
                continue
            raise PfdError(f"{out}: --resume with another {key} ({before.get(key)!r} before, {now.get(key)!r} now); "
                           "resume with the same settings or choose another --out")
    return stale


class InputHashes(TypedDict):
    """What a card's figures depend on, by content (``inputs.json``; :func:`_hashes`)."""

    release_manifest: str
    public_model: str
    state_dir: dict[str, str]
    data: DataDigests
    settings: str
    attack_settings: str


def _hashes(cfg: CardConfig, inputs: CardInputs) -> InputHashes:
    """What the card's figures depend on, by content: the release (its manifest, which holds every
    file's sha256), the state dir's files the audit reads, the public model, every data set's pixel
    digest and the settings. ``--resume`` continues only when all are unchanged (issue 34: a release
    distilled again into the same folder kept the old figures under the new release's hash)."""
    settings = dump_toml({"card": {k: v for k, v in _settings(cfg).items() if k not in _CONTENT and k != "attack"}}).encode()
    attack = dump_toml({"attack": dict(cfg.attack)}).encode()
    read, own = inputs.state.digests, inputs.state.public_model  # hashed as they were opened, not again
    state = {name: d for name, d in read.items() if name != MANIFEST and (own is None or name != own.name)}
    return InputHashes(release_manifest=read[MANIFEST], public_model=inputs.public_model_digest, state_dir=state,
                       data=inputs.digests, settings=hashlib.sha256(settings).hexdigest(),
                       attack_settings=hashlib.sha256(attack).hexdigest())


#: What each entry of :func:`_hashes` is, for the message that refuses a --resume after it changed.
_INPUT_NAMES = {"release_manifest": "the release (--release: its manifest)", "public_model": "the public model",
                "state_dir": "the state dir's files (--state-dir)", "settings": "the settings"}


def _check_inputs(out: Path, hashes: InputHashes, resume: bool) -> set[str]:
    """On ``--resume``, refuse inputs whose content changed since the card began, naming them.

    Returns:
        The inputs only the privacy half reads that changed (``holdout``): its audit is redone and
        the fine-tunes kept.
    """
    saved = out / "inputs.json"
    if not resume or not (out / "config.toml").is_file():
        return set()
    if not saved.is_file():  # inputs.json is written before config.toml: an older pfd began this card
        raise PfdError(f"{out}: --resume of a card that does not record its inputs (made by an older pfd); choose "
                       "another --out to make a new one")
    before = json.loads(saved.read_text(encoding="utf-8"))
    changed, stale = [], set()
    for key in sorted(set(before) | set(hashes)):
        if key == "data":
            old, new = before.get(key) or {}, hashes.get(key) or {}
            for k in sorted(set(old) | set(new)):
                if old.get(k) != new.get(k):
                    if k in _PRIVACY_ONLY:
                        stale.add(k)
                    else:
                        changed.append(f"--{k}" if k != "private" else "the private set (--private)")
        elif key == "attack_settings":
            continue  # what only the audit reads: _claim compares the settings themselves
        elif before.get(key) != hashes.get(key):
            changed.append(_INPUT_NAMES.get(key, key))
    if changed:
        raise PfdError(f"{out}: --resume after {', '.join(changed)} changed since this card began; its figures belong "
                       "to the old inputs: choose another --out (or delete this card) to make a new one")
    return stale


def check_out(cfg: CardConfig, out: Path) -> None:
    """``--out`` apart from every input folder, checked before any input is read.

    Raises:
        PfdError: ``--out`` inside or around the release, ``--state-dir``, ``--public``, ``--test``, ``--holdout``
            or ``--private``.
    """
    check_apart(out, [("the release", cfg.release), ("--state-dir", cfg.state_dir), *[("--public", p) for p in cfg.public],
                      ("--test", cfg.test), ("--holdout", cfg.holdout), ("--private", cfg.private)], option="--out", what="card")


def _begin(cfg: CardConfig, out: Path, inputs: CardInputs) -> InputHashes:
    """Begin the card in its claimed folder, or continue it (``--resume``): the settings and the inputs' content
    checked against what the folder records, then recorded (``inputs.json``, ``config.toml``).

    Returns:
        What the card's figures depend on (:func:`_hashes`).

    Raises:
        PfdError: A card there already without ``--resume``, or a ``--resume`` with other settings or inputs.
    """
    hashes = _hashes(cfg, inputs)
    stale = _claim(cfg, out) | _check_inputs(out, hashes, cfg.resume)
    if stale and (out / "privacy" / "report.json").is_file():
        # Only the audit reads these (issue 34: --resume --holdout was refused, losing the fine-tunes):
        # the privacy half is redone, the fine-tunes and their scores kept.
        (out / "privacy" / "report.json").unlink()
        log.info("card: %s changed: the privacy half is redone, the fine-tunes kept", ", ".join(sorted(stale)))
    atomic_write_text(out / "inputs.json", json.dumps(hashes, indent=1, sort_keys=True))
    atomic_write_text(out / "config.toml", dump_toml({"card": config_to_dict(cfg)}))
    return hashes


@contextlib.contextmanager
def _forget_if_refused(out: Path) -> Iterator[None]:
    """A card that this run began and that an input or setting error stopped before any fine-tune or
    audit finished leaves nothing behind: a rerun is then not refused as "holds a card already"
    (issue 34). Finished work (a fine-tune, the privacy report) is always kept for ``--resume``."""
    began = not (out / "config.toml").is_file()
    try:
        yield
    except PfdError:
        work = (out / "downstream").is_dir() and any((out / "downstream").rglob("*.pt"))
        if began and not work and not (out / "privacy" / "report.json").is_file():
            for name in CARD_ENTRIES - {".pfd-report-lock"}:
                p = out / name
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                elif p.exists():
                    p.unlink()
        raise


@contextlib.contextmanager
def card_folder(cfg: CardConfig, out: Path, inputs: CardInputs) -> Iterator[InputHashes]:
    """Claim ``out`` for one card run (:func:`~pfd.attacks.report_folder.report_folder`: pfd's own or new, one
    writer at a time), begin or resume the card in it (:func:`_begin`), and leave nothing behind where an
    input or setting error stops the run before any work finished (:func:`_forget_if_refused`).

    Args:
        cfg: The card's settings.
        out: The card's folder (``--out``).
        inputs: Its inputs, opened (:func:`~pfd.card.inputs.open_card_inputs`).

    Yields:
        What the card's figures depend on (``inputs.json``).

    Raises:
        PfdError: A foreign or busy folder, a card there already without ``--resume``, or a ``--resume``
            with other settings or inputs.
    """
    with report_folder(out, option="--out", entries=CARD_ENTRIES, what="pfd card"), \
            _forget_if_refused(out):
        yield _begin(cfg, out, inputs)
