"""Every input of a card, opened and cross-checked once before any work, then passed down.

:func:`open_card_inputs` checks the settings first (each audit check's config, naming the card's
recipe keys), then opens the release and its state dir (each file hashed once, as it is read), the
audit (its attackers loaded, the public model among them, whose image size every set is opened at),
and every data set (the private set, the release, each ``--public`` set, the test people and
``--holdout``) through the audit's own set cache (:class:`~pfd.audit.sets.ReleaseSets`), so the
audit reads the same sets and their pixel digests are computed once. The sets are told apart by
content (:mod:`pfd.release.disjoint`) and the test pairs drawn: a missing folder or a test set too
small for the folds is a one-line error before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, TypedDict

from pfd.audit.contract import AuditInputs
from pfd.audit.engine import attack_configs, open_audit
from pfd.audit.inputs import ReleaseState, open_release_state
from pfd.audit.sets import ReleaseSets
from pfd.card.config import CardConfig
from pfd.config import AttackConfig, build_config
from pfd.config.checks import recipe_keys
from pfd.data.faceset import FaceSet, to_memory
from pfd.data.pair_sampling import PairsInfo, adaptive_pairs
from pfd.data.pairs import VerificationPairs
from pfd.data.shape import plain_size
from pfd.errors import PfdError
from pfd.io import sha256_file
from pfd.release.disjoint import check_disjoint_sets, check_other_people, content_digest

__all__ = ["CardInputs", "DataDigests", "open_card_inputs"]


class _DigestFields(TypedDict):
    private: str
    public: list[str]
    test: str


class DataDigests(_DigestFields, total=False):
    """The content digest of each of a card's data sets (:func:`~pfd.release.disjoint.content_digest`):
    the private set, every public set, the test set and the held-out set (with ``--holdout``)."""

    holdout: str


@dataclass
class CardInputs:
    """Every input of a card, opened and cross-checked once before any work, then passed down.

    Attributes:
        state: The release and its state dir (:func:`~pfd.audit.inputs.open_release_state`).
        public_model: The checkpoint the release's users fine-tune; ``public_model_digest`` its SHA-256.
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
    public_model_digest: str
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


def open_card_inputs(cfg: CardConfig, *, progress: bool = True) -> CardInputs:
    """Open and cross-check everything before any work: release, state dir, public model, data sets, pairs, audit.

    Args:
        cfg: The card's settings.
        progress: Progress bars (loading the attackers).

    Returns:
        The :class:`CardInputs`, passed down to every step of the card.

    Raises:
        PfdError: A missing or mismatched input, data sets that are not apart (by content), or a bad setting;
            the settings are checked first, before any file is read.
    """
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
    # The state dir's own was hashed (and checked against the run's record) as it was opened.
    model_digest = sha256_file(public_model) if cfg.public_model else state.digests[Path(public_model).name]
    private = cfg.private or state.private_spec
    if not private:
        raise PfdError(f"no private set: pass --private (the state dir {cfg.state_dir} records none)")
    # The audit first (its attackers loaded, the private set and the release opened through the one set
    # cache): the card's sets are opened at the size its public attacker reads, the model read once.
    attack = replace(attack, private=private, public_model=str(public_model))
    sets = ReleaseSets(private, state.release, skip_bad=cfg.skip_bad, recorded_in=None if cfg.private else cfg.state_dir)
    with recipe_keys("card."):
        audit = open_audit(attack, state=state, sets=sets, progress=progress)
    public_attacker = next(a for a in audit.attackers if a.role == "public")
    if public_attacker.kind != "checkpoint":  # the card fine-tunes it: TorchScript or ONNX cannot be trained on
        raise PfdError(f"{public_model}: a {public_attacker.kind} model; the card fine-tunes the public model: pass a pfd, "
                       "insightface or AdaFace checkpoint (--public-model)")
    size = plain_size(public_attacker.size)
    # Every data set is opened, and the pairs drawn, before anything is written: a missing public
    # folder or a test set too small for the folds is a one-line error with no card folder left behind.
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
    return CardInputs(state=state, public_model=Path(public_model), public_model_digest=model_digest, private=private,
                      size=size, public=public, test=test, release=release, pairs=pairs, pairs_info=info,
                      digests=digests, attack=attack, configs=configs, audit=audit)


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
