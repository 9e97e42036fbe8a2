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

import contextlib
import hashlib
import io
import json
import logging
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, TypedDict

import numpy as np

from pfd.attackers.loading import load_attacker
from pfd.attacks.report_folder import check_apart, report_folder
from pfd.attacks.scorecard.report import write_report
from pfd.audit.contract import AuditInputs
from pfd.audit.engine import attack_configs, open_audit, run_audit
from pfd.audit.inputs import ReleaseState, open_release_state
from pfd.audit.sets import ReleaseSets
from pfd.card.config import CardConfig
from pfd.card.downstream import (downstream_config, finetune, pair_scores, roc_curve, sample_images, utility_gain,
                                 verification)
from pfd.card.pairs import PairsInfo, adaptive_pairs, pair_identities
from pfd.card.render import write_card
from pfd.card.stats import identity_bootstrap_weights
from pfd.config import AttackConfig, build_config, config_to_dict, dump_toml, load_recipe
from pfd.config.checks import recipe_keys
from pfd.data.faceset import ConcatFaces, FaceSet, to_memory
from pfd.data.pairs import VerificationPairs
from pfd.errors import PfdError
from pfd.io import atomic_write_bytes, atomic_write_text, sha256_file
from pfd.nn.checkpoints import read_arch
from pfd.progress import PROGRESS_LOGGER
from pfd.release.disjoint import check_disjoint_sets, check_other_people, content_digest
from pfd.release.format import MANIFEST
from pfd.release.state_dir import StateDir

__all__ = ["Card", "CardInputs", "make_card", "CARD_ENTRIES", "SIDES"]

log = logging.getLogger(PROGRESS_LOGGER)

#: The two downstream models of each seed.
SIDES = ("public-ft", "with-release")
#: Everything a card run writes into its folder (anything else makes the folder foreign).
CARD_ENTRIES = frozenset({"config.toml", "inputs.json", "downstream", "scores", "privacy", "card.json", "card.md", "card.html",
                          ".pfd-report-lock"})
#: Settings that may change between a run and its --resume (they do not change a figure).
_FREE = ("resume", "out", "threads", "skip_bad")
#: Inputs named by a path: a --resume compares what they hold (``inputs.json``), not how they are spelt.
_CONTENT = ("release", "state_dir", "private", "public_model", "public", "test", "holdout")
#: Inputs only the privacy half reads: a --resume after they changed redoes the audit and keeps the fine-tunes.
_PRIVACY_ONLY = ("attack", "holdout")


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


class _DigestFields(TypedDict):
    private: str
    public: list[str]
    test: str


class DataDigests(_DigestFields, total=False):
    """The content digest of each of a card's data sets (:func:`~pfd.release.disjoint.content_digest`):
    the private set, every public set, the test set and the held-out set (with ``--holdout``)."""

    holdout: str


class InputHashes(TypedDict):
    """What a card's figures depend on, by content (``inputs.json``; :func:`_hashes`)."""

    release_manifest: str
    public_model: str
    state_dir: dict[str, str]
    data: DataDigests
    settings: str
    attack_settings: str


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


@dataclass
class CardInputs:
    """Every input of a card, opened and cross-checked once before any work, then passed down.

    Attributes:
        state: The release and its state dir (:func:`~pfd.audit.inputs.open_release_state`).
        public_model: The checkpoint the release's users fine-tune.
        private: The private set's spec.
        size: The image size the downstream models take.
        public: Each ``--public`` set.
        test: The test people (in memory).
        release: The release at ``size``.
        pairs: The test pairs; ``pairs_info`` how they were drawn.
        digests: Every data set's pixel digest (``private``, ``public``, ``test``, ``holdout``).
        attack: The audit's settings; ``configs`` each check's, checked.
        audit: The audit's opened inputs (the same sets, not opened again).
    """

    state: ReleaseState
    public_model: Path
    private: str
    size: Any
    public: list[FaceSet]
    test: FaceSet
    release: FaceSet
    pairs: VerificationPairs
    pairs_info: PairsInfo
    digests: DataDigests
    attack: AttackConfig
    configs: dict[str, Any]
    audit: AuditInputs


def _inputs(cfg: CardConfig, progress: bool) -> CardInputs:
    """Open and cross-check everything before any work: release, state dir, public model, specs."""
    if not cfg.release or not cfg.state_dir:
        raise PfdError("pass --release (the released folder) and --state-dir (the publisher's state dir)")
    if not cfg.public:
        raise PfdError("pass --public DATA (the public training data of the people who will train on the release)")
    if not cfg.test:
        raise PfdError("pass --test SPEC (held-out people of the target domain, never in the private set)")
    attack, configs = _attack_config(cfg)  # settings first, before any file
    state = open_release_state(cfg.release, cfg.state_dir)
    if state.adapted_model is None:  # the card always audits with the insider (pfd attack's --no-insider is not its)
        raise PfdError(f"{cfg.state_dir}: no adapted.pt; pass the state dir pfd distill wrote for this release (the "
                       "card audits it with the publisher's adapted model)")
    public_model = Path(cfg.public_model) if cfg.public_model else state.public_model
    if public_model is None or not Path(public_model).is_file():
        raise PfdError(f"{cfg.state_dir}: no public_model.pt; pass --public-model (the checkpoint the release's users "
                       "fine-tune)")
    private = cfg.private or state.private_spec
    if not private:
        raise PfdError(f"no private set: pass --private (the state dir {cfg.state_dir} records none)")
    size = read_arch(str(public_model)).get("size")
    # Every data set is opened, and the pairs drawn, before anything is written: a missing public
    # folder or a test set too small for the folds is a one-line error with no card folder left behind.
    # They are opened once, through the audit's own sets, which the audit then reads.
    sets = ReleaseSets(private, state.release, skip_bad=cfg.skip_bad, recorded_in=None if cfg.private else cfg.state_dir)
    opened = {spec: sets.dataset(spec, size) for spec in [*cfg.public, cfg.test, *([cfg.holdout] if cfg.holdout else [])]}
    public, test, holdout = [opened[spec] for spec in cfg.public], to_memory(opened[cfg.test]), opened.get(cfg.holdout)
    private_set, release = sets.private(size), sets.proxies(size)
    digests = _check_disjoint(cfg, private, private_set, public, test, release, holdout)
    e = cfg.eval
    pairs, info = adaptive_pairs(test, num_pairs=e.pairs, seed=e.seed, folds=e.folds)
    n_public = sum(len(f) for f in public)
    n_public = min(n_public, cfg.downstream.public_images) if cfg.downstream.public_images > 0 else n_public
    if cfg.downstream.batch_size > n_public:
        raise PfdError(f"--batch-size {cfg.downstream.batch_size} is larger than the {n_public} public images the "
                       f"public-ft side trains on; pass --batch-size {n_public} or fewer")
    attack = replace(attack, private=private, public_model=str(public_model))
    with recipe_keys("card."):
        audit = open_audit(attack, state=state, sets=sets, progress=progress)
    return CardInputs(state=state, public_model=Path(public_model), private=private, size=size, public=public,
                      test=test, release=release, pairs=pairs, pairs_info=info, digests=digests, attack=attack,
                      configs=configs, audit=audit)


def _attack_config(cfg: CardConfig) -> tuple[AttackConfig, dict[str, Any]]:
    """The audit's configuration from ``[card.attack.*]`` (+ --holdout) and each check's, checked before any work.

    A broken setting names the card's recipe key (``card.attack.hubness.k``), not ``pfd attack``'s
    flag (``--csls-k``), which pfd card does not have (issue 34).
    """
    layers: dict[str, str | bool] = {"release": cfg.release, "state_dir": cfg.state_dir, "private": cfg.private,
                              "public_model": cfg.public_model, "report": str(Path(cfg.out).expanduser() / "privacy"),
                              "skip_bad": cfg.skip_bad}
    for name in sorted(cfg.attack):  # issue 54: `[card.attack] linkability = "x"` was a ValueError traceback
        if not isinstance(cfg.attack[name], Mapping):
            raise PfdError(f"card.attack.{name} = {cfg.attack[name]!r}: expected a table of that attack's settings "
                           f"([card.attack.{name}] followed by key = value lines)")
    attacks = {name: dict(cfg.attack[name]) for name in sorted(cfg.attack)}
    if cfg.holdout:  # membership: a downstream model on the public data + the release, audited on the holdout
        attacks["membership"] = {**attacks.get("membership", {}), "holdout": cfg.holdout, "public": cfg.public[0]}
    acfg = build_config(AttackConfig, attacks, layers)
    with recipe_keys("card."):
        return acfg, attack_configs(acfg)


def _check_disjoint(cfg: CardConfig, private_spec: str, private: FaceSet, public: list[FaceSet], test: FaceSet,
                    release: FaceSet, holdout: FaceSet | None) -> DataDigests:
    """The card's data sets told apart by content (:mod:`pfd.release.disjoint`), never by their spelling.

    Returns:
        The content digest of every data set (``private``, ``public`` (a list), ``test``, ``holdout``).
    """
    held_out = "the test people must be held out of the release"
    check_disjoint_sets(test, private, a_flag=f"--test {cfg.test}", b_flag=f"the private set {private_spec}",
                        fix=f"{held_out}: remove them from --test")
    check_other_people(test, private, a_flag=f"--test {cfg.test}", b_flag=f"the private set {private_spec}",
                       fix=f"{held_out}: remove them from --test")
    check_disjoint_sets(test, release, a_flag=f"--test {cfg.test}",
                        b_flag=f"the release {cfg.release}", fix="--test holds real photos of people the release "
                        "was not distilled from, never the release")
    for spec, faces in zip(cfg.public, public):
        check_disjoint_sets(test, faces, a_flag=f"--test {cfg.test}", b_flag=f"--public {spec}",
                            fix="the test people must be unseen by every model the card compares: remove them from "
                                "--test or from --public")
    seen: dict[str, str] = {}
    for spec, faces in zip(cfg.public, public):
        d = content_digest(faces)
        if d in seen:
            raise PfdError(f"--public {spec} holds the same images as --public {seen[d]}: every public image would be "
                           "trained on twice; pass each public set once")
        seen[d] = spec
    digests = DataDigests(private=content_digest(private), public=list(seen), test=content_digest(test))
    if holdout is not None:
        check_disjoint_sets(holdout, private, a_flag=f"--holdout {cfg.holdout}", b_flag=f"the private set {private_spec}",
                            fix="the held-out people are the non-members of the membership test: pass people the "
                                "release was not distilled from")
        check_other_people(holdout, private, a_flag=f"--holdout {cfg.holdout}", b_flag=f"the private set {private_spec}",
                           fix="the held-out people are the non-members of the membership test: pass people the "
                               "release was not distilled from")
        digests["holdout"] = content_digest(holdout)
    return digests


def _hashes(cfg: CardConfig, inputs: CardInputs) -> InputHashes:
    """What the card's figures depend on, by content: the release (its manifest, which holds every
    file's sha256), the state dir's files the audit reads, the public model, every data set's pixel
    digest and the settings. ``--resume`` continues only when all are unchanged (issue 34: a release
    distilled again into the same folder kept the old figures under the new release's hash)."""
    settings = dump_toml({"card": {k: v for k, v in _settings(cfg).items() if k not in _CONTENT and k != "attack"}}).encode()
    attack = dump_toml({"attack": dict(cfg.attack)}).encode()
    st = StateDir.at(cfg.state_dir)
    state = {p.name: sha256_file(p) for p in (st.proxy_map, st.adapted, st.judge_model, st.private_set) if p.is_file()}
    return InputHashes(release_manifest=sha256_file(Path(cfg.release) / MANIFEST),
                       public_model=sha256_file(inputs.public_model), state_dir=state, data=inputs.digests,
                       settings=hashlib.sha256(settings).hexdigest(), attack_settings=hashlib.sha256(attack).hexdigest())


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


def _check_out(cfg: CardConfig, out: Path) -> None:
    """``--out`` apart from every input folder (``--out`` inside the release is refused by its report folder)."""
    check_apart(out, [("--state-dir", cfg.state_dir), *[("--public", p) for p in cfg.public], ("--test", cfg.test),
                      ("--holdout", cfg.holdout), ("--private", cfg.private)], option="--out", what="card")


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
    _check_out(cfg, out)
    inputs = _inputs(cfg, progress)
    with report_folder(out, option="--out", release=cfg.release, entries=CARD_ENTRIES, what="pfd card"), \
            _forget_if_refused(out):
        hashes = _begin(cfg, out, inputs)
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
