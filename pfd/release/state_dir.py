"""Every rule of the publisher's private state dir: its layout, marker, modes, lock and separation.

The state dir holds what must never be published. Layout (a contract: the attacks and the lint
read it; the names are fixed)::

    state/                      mode 0700, never inside the release nor containing it
      pfd-state.json            the marker, written first: format, version, run id (:func:`write_marker`)
      .pfd-lock                 flock'ed by the run that owns the state dir (pid inside; :class:`StateLock`)
      config.toml               the resolved DistillConfig ([distill] with nested tables; a recipe)
      private_set.json          identities and per-image pixel digests of the private set (resume checks it)
      init_pool_check.json      the initialisation pool's copy check passed, for which pool and private set
      public_model.pt           the public starting checkpoint (pfd format; the attacker's model)
      judge_model.pt            the gate's judge, a model no loss sees (release.judge; only with one)
      adapted.pt                adapted backbone + head (2N classes for pfd, N otherwise) + config
      rotation.pt               {"M": (D, D), "A": (D, D) | None}; the identity for non-pfd methods
      prototypes.pt             {"P": (NK, D), "proto_identity": (NK,), "identities": [...], ...}
      proxy_map.json            released file -> source identity (:func:`pfd.release.writer.write_proxy_map`)
      batches/batch_XXXXX.pt    finished RTA batches (resume skips them)
      ogp/                      fine-tuning checkpoints (resume), config.toml, metrics.jsonl
      summary.json              times per stage, final losses, counts, rates
      audit.json                the publication gate's whole audit: every figure, check and the verdict

The rules, each in one place here:

* **The marker** (:data:`MARKER`, :func:`write_marker`, :func:`read_marker`): the first file a run
  writes into its state dir, ``{"format": "pfd-state", "format_version": 1, "run_id": <uuid hex>}``.
  A folder without it is not pfd's and is never chmodded or written to. The release's manifest
  names the same run id: :func:`check_same_run` pairs a release with its state dir. As the run
  writes its models (``public_model.pt``, ``judge_model.pt``, ``adapted.pt``) and ``proxy_map.json``
  the marker records their SHA-256 too (:func:`record_digest`), and every reader compares them
  (:func:`check_digest`).
* **Modes** (:func:`prepare_state_dir`, :func:`secure_state_dir`): every folder 0700, every file
  0600, whatever the umask.
* **Separation** (:func:`check_separate`, :func:`check_outside_release`): the release and the
  state dir never contain each other; no private state lies inside the release.
* **No clobbering, nothing foreign touched** (:func:`check_outputs`): without ``--resume`` the
  state dir must be new, empty, or a pfd state dir whose run wrote nothing but its stub; with it,
  it must carry the marker, and a release already there must name the same run id.
* **One writer** (:class:`StateLock`, :func:`claim_state_dir`): an exclusive ``fcntl.flock`` on
  ``.pfd-lock`` for the whole run; the kernel drops it when the process ends (kill -9 included),
  so it is never stale, and a second run is refused with the holder's pid. The checks run again
  once it is held, so two runs started together cannot both find the folders empty.

Every file is written atomically; a batch file exists only once its batch is finished, so after a
kill the state dir holds finished work only. :func:`pfd.distill.claim.claim_run` applies these
rules for ``pfd distill``; the scorecard (:mod:`pfd.audit.inputs`) and ``pfd release
lint`` read the layout through :class:`StateDir`.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, TypedDict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only (pyproject's tomli)
    import tomli as tomllib

from pfd.errors import PfdError
from pfd.io import PidLock, atomic_write_json, check_writable, path_within, sha256_bytes, sha256_file
from pfd.release.format import MANIFEST, Manifest, read_manifest

__all__ = [
    "MARKER", "MARKER_FORMAT", "MARKER_VERSION", "LOCK", "PROXY_MAP", "STATE_FILE_MODE", "STATE_DIR_MODE",
    "StateDir", "read_marker", "write_marker", "new_run_id", "check_same_run", "release_sources", "recorded_private_spec", "read_run_config", "run_setting", "run_private_spec", "check_outside_release",
    "check_separate", "check_apart_from_private", "prepare_state_dir", "secure_state_dir", "read_proxy_map", "DIGESTS", "record_digest", "check_digest", "StateLock", "check_outputs",
    "RunClaim", "claim_state_dir", "Marker", "ProxyMap", "ProxyRow",
]

#: The marker that makes a folder a pfd state dir: the first file every run writes into it.
MARKER = "pfd-state.json"
MARKER_FORMAT = "pfd-state"
MARKER_VERSION = 1
#: The lock file, flock'ed by the run that owns the state dir (:class:`StateLock`).
LOCK = ".pfd-lock"
#: The proxy -> source map.
PROXY_MAP = "proxy_map.json"
class _MarkerFields(TypedDict):
    format: str
    format_version: int
    run_id: str


class Marker(_MarkerFields, total=False):
    """The state dir's marker (:data:`MARKER`): its format, the run's id, and the SHA-256 of each
    state file the run wrote (:data:`DIGESTS`, :func:`record_digest`)."""

    digests: dict[str, str]


class _ProxyRowFields(TypedDict):
    index: int
    file: str
    label: str
    source: int


class ProxyRow(_ProxyRowFields, total=False):
    """One proxy of the proxy map: its index, released file and label, its source's label (and name)."""

    source_name: str


class _ProxyMapFields(TypedDict):
    release: str
    label_seed: int
    class_label: dict[str, str]
    proxies: list[ProxyRow]


class ProxyMap(_ProxyMapFields, total=False):
    """``proxy_map.json`` (private): the release it maps, the label seed, internal class -> released
    label, one :class:`ProxyRow` per proxy, and the run's ``extra`` fields (method, prototype rows)."""

    extra: dict[str, object]


#: Modes of everything in the state dir.
STATE_FILE_MODE, STATE_DIR_MODE = 0o600, 0o700
#: What a run writes before its first stage (a failed one leaves only these).
STUB = (MARKER, "config.toml", "private_set.json", "init_pool_check.json")


@dataclass(frozen=True)
class StateDir:
    """Paths inside a state dir (see the module docstring)."""

    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike) -> "StateDir":
        return cls(Path(path).expanduser())

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def public_model(self) -> Path:
        return self.root / "public_model.pt"

    @property
    def judge_model(self) -> Path:
        return self.root / "judge_model.pt"

    @property
    def private_set(self) -> Path:
        return self.root / "private_set.json"

    @property
    def init_pool_check(self) -> Path:
        """The initialisation pool's copy check that passed (:func:`pfd.distill.init_pool.record_pool_check`)."""
        return self.root / "init_pool_check.json"

    @property
    def adapted(self) -> Path:
        return self.root / "adapted.pt"

    @property
    def rotation(self) -> Path:
        return self.root / "rotation.pt"

    @property
    def prototypes(self) -> Path:
        return self.root / "prototypes.pt"

    @property
    def proxy_map(self) -> Path:
        return self.root / PROXY_MAP

    @property
    def batches(self) -> Path:
        return self.root / "batches"

    @property
    def ogp(self) -> Path:
        return self.root / "ogp"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def audit(self) -> Path:
        """The publication gate's whole audit (:attr:`pfd.audit.engine.Scorecard.data`, JSON)."""
        return self.root / "audit.json"

    @property
    def marker(self) -> Path:
        return self.root / MARKER

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    def batch(self, index: int) -> Path:
        """The file of RTA batch ``index``."""
        return self.batches / f"batch_{int(index):05d}.pt"

    def finished(self) -> set[int]:
        """Indices of the batches whose files exist."""
        if not self.batches.is_dir():
            return set()
        return {int(p.stem.split("_")[1]) for p in self.batches.glob("batch_*.pt") if p.stem.split("_")[1].isdigit()}

    def entries(self) -> set[str]:
        """Names in the state dir, the lock file aside (an empty set when it does not exist)."""
        if not self.root.is_dir():
            return set()
        return {p.name for p in self.root.iterdir()} - {LOCK}


# --------------------------------------------------------------------------------------------
# The marker
# --------------------------------------------------------------------------------------------


def read_marker(state_dir: str | os.PathLike) -> Marker | None:
    """The marker of a pfd state dir (:data:`MARKER`), or ``None`` if it has none (or an unreadable one)."""
    p = Path(state_dir) / MARKER
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != MARKER_FORMAT or not isinstance(doc.get("run_id"), str):
        return None
    return doc



def new_run_id() -> str:
    """A random run id (names nothing: 128 random bits)."""
    return uuid.uuid4().hex



def write_marker(state_root: str | os.PathLike, run_id: str) -> Path:
    """Write (atomically, 0600) the marker naming ``run_id``."""
    p = Path(state_root) / MARKER
    atomic_write_json(p, Marker(format=MARKER_FORMAT, format_version=MARKER_VERSION, run_id=str(run_id)))
    os.chmod(p, STATE_FILE_MODE)
    return p



#: Marker key of the digests of the state files a run wrote (:func:`record_digest`).
DIGESTS = "digests"


def record_digest(state_dir: str | os.PathLike, name: str) -> None:
    """Record a state file's SHA-256 in the marker, right after the run wrote it.

    The proxy map (:func:`pfd.release.writer.write_proxy_map`), the public model and judge (as
    they are stored) and the adapted model (after OGP) are recorded; every reader compares
    (:func:`check_digest`): a map edited after the run (a
    source renumbered, rows swapped or copied from another run) scores the release against sources
    that are not its own, and an adapted model replaced by another checkpoint plays an insider who
    never saw the private set; an audit at chance against either reads "publishable" (issue 54).
    The digests stay in the private state dir: in the public manifest the map's would let anyone
    test guessed maps of a small release.

    Args:
        state_dir: The run's state dir (a folder without a marker is not pfd's: nothing recorded).
        name: The file's name in it.
    """
    marker = read_marker(state_dir)
    if marker is None:
        return
    digests = dict(marker.get(DIGESTS) or {})
    digests[name] = sha256_file(Path(state_dir) / name)
    p = Path(state_dir) / MARKER
    atomic_write_json(p, {**marker, DIGESTS: digests})
    os.chmod(p, STATE_FILE_MODE)


def check_digest(state_dir: str | os.PathLike, name: str, *, data: bytes | None = None) -> str | None:
    """Refuse a state file that differs from the one the run recorded (:func:`record_digest`).

    Args:
        state_dir: The state dir.
        name: The file's name in it.
        data: Its bytes, if already read (else the file is hashed).

    Returns:
        The file's SHA-256 as read now (``None``: no such file), for callers that record what they read.

    Raises:
        PfdError: Naming the file, when the marker records a digest the file no longer has.
    """
    marker = read_marker(state_dir) or {}
    digests = marker.get(DIGESTS, {})
    if not isinstance(digests, dict):
        raise PfdError(f"{Path(state_dir) / MARKER}: its {DIGESTS!r} is not a table of file digests; the state dir "
                       "is damaged: publish again with pfd distill")
    path = Path(state_dir) / name
    got = sha256_bytes(data) if data is not None else (sha256_file(path) if path.is_file() else None)
    want = digests.get(name)
    if want and got != want:  # recorded by no run (a state dir from before digests, or by hand): nothing to compare
        raise PfdError(f"{path}: {'missing' if got is None else 'edited or replaced'} after the run wrote it (its "
                       f"SHA-256 differs from the one {MARKER} recorded); restore the file pfd distill wrote, or "
                       "publish again with pfd distill")
    return got


def check_same_run(release: str | os.PathLike, state_dir: str | os.PathLike, *, manifest: Manifest | None = None) -> None:
    """Refuse a state dir that is not provably the one of the run that wrote the release.

    Both sides must name a run id and the two must agree: scoring a release against another run's
    proxy -> source map gives meaningless figures, and a lint against another run's state checks
    nothing about this release. A missing id on either side is a refusal, not a pass (issue 54: a
    state dir without its marker beside another run's release read "publishable").

    Raises:
        PfdError: Naming the file without a run id, or both run ids, and what to pass instead.
    """
    manifest = read_manifest(release) if manifest is None else manifest
    marker = read_marker(state_dir)
    ours = manifest.get("run_id") if manifest else None
    theirs = marker.get("run_id") if marker else None
    if not isinstance(ours, str) or not ours:
        raise PfdError(f"{Path(release) / MANIFEST}: names no run id, so no state dir can be shown to be its own; "
                       "publish releases with pfd distill, which records the run that wrote them")
    if not isinstance(theirs, str) or not theirs:
        raise PfdError(f"{Path(state_dir) / MARKER}: missing or names no run id, so this is not provably the state dir "
                       f"of the run that wrote {release}; pass the --state-dir that pfd distill wrote with it")
    if ours != theirs:
        raise PfdError(f"{state_dir}: the state dir of run {theirs[:12]}, but {release} was written by run {ours[:12]}; "
                       "pass the --state-dir of the run that wrote this release")


def release_sources(release: str | os.PathLike, state_dir: str | os.PathLike, *,
                    manifest: Manifest | None = None) -> dict[str, tuple[int, str | None]]:
    """The one check that a release and a state dir belong together: same run, same files.

    Used by ``pfd release lint`` (as a finding), the audit's integrity check through it, and every
    reader of a release with its state (``pfd attack``, ``pfd card``, the benchmark): the run ids
    (:func:`check_same_run`), then every released file (listed in the manifest or on disk) must have
    a row in the proxy map and every row a file in the release (issue 54: a class of copied proxies,
    a deleted file, a renamed label or a duplicated proxy, each with the manifest rewritten, passed
    lint while the audit refused them).

    Args:
        release: The release folder.
        state_dir: The state dir.
        manifest: The release's manifest, if already read.

    Returns:
        ``{file: (source label, source name or None)}`` from the proxy map.

    Raises:
        PfdError: The first mismatch, naming the file and the count of such files.
    """
    r = Path(release)
    manifest = read_manifest(r) if manifest is None else manifest
    check_same_run(r, state_dir, manifest=manifest)
    where = Path(state_dir) / PROXY_MAP
    rows = read_proxy_map(state_dir).get("proxies")
    if not isinstance(rows, list) or not rows:
        raise PfdError(f"{where}: no 'proxies' list; the state dir is damaged, re-run pfd distill")
    sources: dict[str, tuple[int, str | None]] = {}
    for row in rows:
        try:
            f, src = str(row["file"]), int(row["source"])
        except (KeyError, TypeError, ValueError):
            raise PfdError(f"{where}: a proxy row without 'file' and integer 'source' ({row!r:.80}); "
                           "the state dir is damaged") from None
        if f in sources:
            raise PfdError(f"{where}: {f} has two rows; the state dir is damaged")
        name = row.get("source_name")
        sources[f] = (src, str(name) if name is not None else None)
    listed = set(manifest.get("files", {})) if manifest and isinstance(manifest.get("files"), dict) else set()
    on_disk = {p.relative_to(r).as_posix() for p in r.glob("*/*") if p.is_file() or p.is_symlink()}
    extra = sorted((listed | on_disk) - set(sources))
    if extra:
        raise PfdError(f"{r / extra[0]}: released file not in {where} ({len(extra)} such); the release holds files its "
                       "run did not write (or the state dir is not this release's)")
    missing = sorted(set(sources) - on_disk)
    if missing:
        raise PfdError(f"{r / missing[0]}: in {where} but not in the release ({len(missing)} such); the release is "
                       "incomplete or edited: publish it again with pfd distill --resume")
    return sources


# --------------------------------------------------------------------------------------------
# Separation and modes
# --------------------------------------------------------------------------------------------


def check_outside_release(path: str | os.PathLike, release: str | os.PathLike, *, what: str, option: str) -> None:
    """Refuse private state (``what``, set by ``option``) at or below the release folder.

    Raises:
        PfdError: Naming the path, the release and the option to change.
    """
    if path_within(path, release):
        raise PfdError(f"{path}: {what} lies inside the release {release} and would be published; "
                       f"choose a {option} outside the release")



def check_separate(release: str | os.PathLike, state_dir: str | os.PathLike) -> None:
    """Refuse a state dir inside the release or a release inside the state dir (symlinks resolved).

    Raises:
        PfdError: Naming both paths and the fix.
    """
    r = Path(release).expanduser().resolve()
    s = Path(state_dir).expanduser().resolve()
    check_outside_release(state_dir, release, what="the state dir", option="--state-dir")
    if path_within(r, s):
        raise PfdError(
            f"{release}: the release lies inside the state dir {state_dir}; choose separate folders for --out and --state-dir"
        )



def prepare_state_dir(state_dir: str | os.PathLike, *, release: str | os.PathLike | None = None) -> Path:
    """Create the private state dir with mode 0700 (set explicitly: ``makedirs`` obeys umask).

    Args:
        state_dir: The folder (parents are created with default permissions).
        release: The release folder it must stay apart from.

    Raises:
        PfdError: If it overlaps ``release`` or exists as a file.
    """
    p = Path(state_dir).expanduser()
    if release is not None:
        check_separate(release, p)
    if p.exists() and not p.is_dir():
        raise PfdError(f"{p}: exists and is not a folder; choose another --state-dir")
    p.mkdir(parents=True, exist_ok=True)
    os.chmod(p, STATE_DIR_MODE)
    return p



def secure_state_dir(state_dir: str | os.PathLike) -> None:
    """Make every folder of the state dir 0700 and every file 0600, whatever the umask was.

    Symlinks are not followed (their targets are not pfd's to change).
    """
    root = Path(state_dir)
    os.chmod(root, STATE_DIR_MODE)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath, d)
            if not p.is_symlink():
                os.chmod(p, STATE_DIR_MODE)
        for f in filenames:
            p = Path(dirpath, f)
            if not p.is_symlink():
                os.chmod(p, STATE_FILE_MODE)



def read_run_config(state_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's parsed ``config.toml`` (empty if absent).

    Raises:
        PfdError: If the config is not valid TOML.
    """
    p = StateDir.at(state_dir).config
    if not p.is_file():
        return {}
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise PfdError(f"{p}: invalid TOML ({e}); the state dir is damaged") from None


def run_setting(config: Mapping[str, Any], key: str) -> Any:
    """A setting of the run a state dir records: ``[distill] key`` of its config (the top level where the
    config has no ``[distill]`` table), ``None`` where absent.

    Args:
        config: The parsed config (:func:`read_run_config`).
        key: E.g. ``"private"``, ``"size"``.
    """
    table = config.get("distill", config)
    value = table.get(key) if isinstance(table, Mapping) else None
    return None if isinstance(value, Mapping) else value


def recorded_private_spec(state_dir: str | os.PathLike) -> str | None:
    """The private set a state dir's run distilled (``[distill] private`` of its ``config.toml``), if recorded.

    Raises:
        PfdError: If the config is not valid TOML.
    """
    return run_private_spec(read_run_config(state_dir))


def run_private_spec(config: Mapping[str, Any]) -> str | None:
    """The private set's spec in a run's parsed config (:func:`run_setting` ``"private"``), if recorded."""
    spec = run_setting(config, "private")
    return spec if isinstance(spec, str) and spec else None


def read_proxy_map(state_dir: str | os.PathLike) -> ProxyMap:
    """Read ``state_dir/proxy_map.json``.

    Raises:
        PfdError: If it is missing, unreadable, or not the map the run recorded in its marker
            (:func:`record_digest`).
    """
    path = Path(state_dir) / PROXY_MAP
    try:
        data = path.read_bytes()
        doc = json.loads(data.decode("utf-8"))
    except OSError:
        raise PfdError(f"{path}: no proxy map; pass the --state-dir that pfd distill wrote") from None
    except ValueError as e:
        raise PfdError(f"{path}: not valid JSON ({e}); the state dir is damaged") from None
    check_digest(state_dir, PROXY_MAP, data=data)
    return doc



# --------------------------------------------------------------------------------------------
# One writer, nothing clobbered
# --------------------------------------------------------------------------------------------


class StateLock(PidLock):
    """The run's exclusive lock on ``<state>/.pfd-lock`` (:class:`pfd.io.PidLock`), held until :meth:`release`.

    Args:
        state_root: The state dir (created with mode 0700 if missing).

    Raises:
        PfdError: If another process holds the lock; the message names its pid.
    """

    def __init__(self, state_root: str | os.PathLike) -> None:
        self.root = Path(state_root)
        fresh = not self.root.exists()
        #: Whether this lock created the state dir (a failed first run then removes its stub).
        self.created = fresh
        self.root.mkdir(parents=True, exist_ok=True)
        if fresh:
            os.chmod(self.root, STATE_DIR_MODE)
        super().__init__(self.root / LOCK, busy=self.busy_message(self.root))

    @staticmethod
    def busy_message(root: Path) -> str:
        """The refusal while another run holds ``root``'s lock (``{pid}`` to fill in)."""
        return f"{root}: another pfd distill (pid {{pid}}) is using this state dir; wait for it to finish or choose another --state-dir"



def _holds_work(state: StateDir, marker: Marker | None) -> bool:
    """Whether a stage of a pfd run finished in ``state`` (a fresh run would overwrite it).

    The marker, ``config.toml`` and the private-set record alone are what a run that failed
    before its first stage leaves: they do not count, so the corrected rerun needs no cleaning by hand.
    """
    if marker is None:
        return bool(state.entries())
    return bool(state.entries() - set(STUB))



def _release_holds_work(out: Path) -> bool:
    return out.exists() and (not out.is_dir() or any(out.iterdir()))



def check_outputs(out: Path, state: StateDir, *, resume: bool) -> None:
    """Refuse to clobber earlier work or to touch folders pfd did not make (read-only).

    Without ``resume`` the state dir must be new, empty or a pfd state dir whose run wrote
    nothing but its marker and config, and the release folder new or empty. With ``resume`` the
    state dir must carry pfd's marker, and a release already in ``out`` must name the same run id
    in its manifest (a half-written release without a manifest is finished by the run).

    Raises:
        PfdError: Naming the folder and what to do.
    """
    if state.root.exists() and not state.root.is_dir():
        raise PfdError(f"{state.root}: exists and is not a folder; choose another --state-dir")
    marker = read_marker(state.root)  # read once: every decision below is on this marker
    if resume:
        if marker is None:
            if state.entries():
                raise PfdError(
                    f"{state.root}: not a pfd state dir (no {MARKER}); --resume continues only a run that pfd distill "
                    "started there, and this folder is left untouched; check --state-dir"
                )
            raise PfdError(f"{state.root}: no pfd run to resume (no {MARKER}); run without --resume to start one")
        if (out / MANIFEST).exists() or (out / MANIFEST).is_symlink():
            manifest = read_manifest(out)
            if manifest is None or manifest.get("run_id") != marker["run_id"]:
                raise PfdError(
                    f"{out}: holds a release written by another run than the one in {state.root}; --resume leaves it "
                    "untouched: pass this run's --out or a new folder"
                )
        return
    if marker is None and state.entries():
        raise PfdError(
            f"{state.root}: holds files that pfd distill did not write (no {MARKER}); choose an empty or new --state-dir"
        )
    if _holds_work(state, marker):
        raise PfdError(
            f"{state.root}: the state dir already holds a distillation run; pass --resume to continue it "
            "or choose another --state-dir"
        )
    if _release_holds_work(out):
        manifest = read_manifest(out) if out.is_dir() else None
        if manifest is None:  # --resume would refuse it too: do not suggest it
            raise PfdError(f"{out}: already exists and holds files that are not a pfd release; it is left untouched: "
                           "choose an empty or new --out")
        raise PfdError(f"{out}: already holds the release of another pfd run (not of {state.root}); to continue that "
                       "run pass its --state-dir with --resume, else choose another --out")



@dataclass
class RunClaim:
    """A run's hold on its state dir: the lock (main process only) and the run id.

    Attributes:
        state: The state dir.
        out: The release folder.
        run_id: The run id written to the marker and to the release manifest (``None`` on
            processes other than the main one).
        lock: The held lock (``None`` on other processes).
    """

    state: StateDir
    out: Path
    run_id: str | None
    lock: StateLock | None

    def begin(self) -> None:
        """Main process: make the state dir private (0700) and write the marker first."""
        if self.lock is None or self.run_id is None:
            return
        prepare_state_dir(self.state.root, release=self.out)
        old = read_marker(self.state.root)
        if old is None or old["run_id"] != self.run_id:
            write_marker(self.state.root, self.run_id)
        self.secure()  # a resumed run also tightens what a killed one left

    def secure(self) -> None:
        """Main process: every folder of the state dir 0700, every file 0600 (after each stage)."""
        if self.lock is not None and self.state.root.is_dir():
            secure_state_dir(self.state.root)

    def close(self, *, failed: bool = False) -> None:
        """Tighten every file and folder of the state dir (0600 / 0700), then drop the lock.

        Args:
            failed: The run stopped with an error. If it made the state dir and no stage finished
                (only the marker and ``config.toml`` are there), the stub is removed: a run that
                failed on its input leaves nothing behind to clean up by hand.
        """
        if self.lock is None:
            return
        stub = failed and getattr(self.lock, "created", False) and self.state.entries() <= set(STUB)
        try:
            if read_marker(self.state.root) is not None and not stub:
                self.secure()
        finally:
            self.lock.release()
        if stub:
            for name in (*STUB, LOCK):
                (self.state.root / name).unlink(missing_ok=True)
            try:
                self.state.root.rmdir()
            except OSError:  # something appeared meanwhile: keep it
                pass



def check_apart_from_private(out: Path, state_root: Path, private: Path, spec: str) -> None:
    """Neither the release nor the state dir may lie in the private identity folder, nor contain it.

    A release written into the private folder mixes the public artefact with the photos it must
    not reveal (and becomes an "identity" of the next run); a private folder inside the release
    would be published with it.

    Raises:
        PfdError: Naming the folder, the private set (as given: ``spec``) and the option to change.
    """
    if not private.is_dir():
        return
    for path, option, what in ((out, "--out", "the release"), (state_root, "--state-dir", "the state dir")):
        if path_within(path, private):
            raise PfdError(f"{path}: {what} would lie inside the private set {spec} (its photos and the "
                           f"release must stay apart); choose an {option} outside it")
        if path_within(private, path):
            raise PfdError(f"{path}: {what} would contain the private set {spec}; choose an {option} that "
                           "does not hold the private photos")


def claim_state_dir(state: StateDir, out: Path, *, resume: bool, main: bool = True, embed_cache: Path | None = None,
                    private: tuple[Path, str] | None = None, check: Callable[[], None] | None = None) -> RunClaim:
    """Claim a state dir for one run: every folder rule, the caller's own checks, then the lock.

    In order, each refusing before anything is written:

    1. the release and the state dir are separate (:func:`check_separate`), an embedding cache
       (private state) lies outside the release, and neither lies in the private set's folder nor
       holds it (:func:`check_apart_from_private`);
    2. both folders can be written (``--out``, ``--state-dir``);
    3. :func:`check_outputs`: no earlier work is clobbered and no foreign folder touched;
    4. ``check()``: the caller's checks (a distillation's settings and inputs), which must also
       fail before anything is written;
    5. the lock (main process), then the checks of 3 again under it (so that two runs started
       together cannot both find the folders empty), and the run id.

    Args:
        state: The state dir.
        out: The release folder.
        resume: ``--resume``: keep the marker's run id.
        main: Whether this process takes the lock (the main process of an accelerate run).
        embed_cache: A cache of private embeddings (``--embed-cache``), or ``None``.
        private: ``(folder, as given)`` of the private set, or ``None`` (a set that is no folder).
        check: The caller's checks, between the read-only ones and the lock.

    Returns:
        The claim; :meth:`RunClaim.begin` then writes the marker, :meth:`RunClaim.close` ends it.

    Raises:
        PfdError: The first check that fails, naming the folder or option and the fix; another
            run holds the lock (its pid is named).
    """
    check_separate(out, state.root)
    if embed_cache is not None:  # cached private embeddings are private state: never inside the release
        check_outside_release(embed_cache, out, what="the embedding cache", option="--embed-cache")
    if private is not None:
        check_apart_from_private(out, state.root, *private)
    for path, option in ((out, "--out"), (state.root, "--state-dir")):
        check_writable(path, option)
    try:
        check_outputs(out, state, resume=resume)
    except PfdError:
        # A run holding the lock may be mid-write (its marker's temporary file, its first stage):
        # name that run, not "files pfd did not write".
        pid = StateLock.holder(state.root / LOCK)
        if pid is not None:
            raise PfdError(StateLock.busy_message(state.root).format(pid=pid)) from None
        raise
    if main:
        # A run holding the lock now is named before the caller's checks, which may take minutes (a
        # distillation's start pool is searched for private photos); the lock below still decides.
        pid = StateLock.holder(state.root / LOCK)
        if pid is not None:
            raise PfdError(StateLock.busy_message(state.root).format(pid=pid))
    if check is not None:
        check()
    if not main:
        return RunClaim(state, out, None, None)
    lock = StateLock(state.root)
    try:
        check_outputs(out, state, resume=resume)
        marker = read_marker(state.root)
        run_id = marker["run_id"] if resume and marker is not None else new_run_id()
    except BaseException:
        lock.release()
        raise
    return RunClaim(state, out, run_id, lock)
