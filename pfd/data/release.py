"""The published release and the private state dir that must never travel with it.

A release is an ImageFolder tree ``OUT/<label>/<k>.png`` plus ``OUT/manifest.json``:

* ``<label>`` is a zero-padded number (``0007``); labels are an arbitrary permutation of the
  internal proxy classes drawn from ``np.random.default_rng(label_seed)``, redrawn if it looks
  ordered (see :func:`looks_ordered`), so label order says nothing about source order. Within a
  class the image order is shuffled by the same generator.
* PNGs carry pixels only: PIL writes IHDR, IDAT and IEND for an RGB image without ``pnginfo``
  (no tEXt/iTXt/zTXt/tIME/pHYs/eXIf); ``optimize=False`` and a fixed compression level make the
  bytes a function of the pixels, so a resumed run writes byte-identical files.
* ``manifest.json`` holds the format, counts, image size (``S``, or ``[H, W]`` for non-square
  proxies), the method, the run id (a random id
  that ties the release to the state dir of the run that wrote it, for ``--resume``) and a
  sha256 per file -- no names, no seeds, no rotation, no model, no timestamps, nothing else
  (:data:`MANIFEST_KEYS`; the lint fails any other key).
* The release is the public artefact: files are 0644, folders 0755, whatever the umask. Only one
  process writes into a release folder at a time (an ``flock`` on the folder).

The label seed, the proxy->source map and everything else private go to the state dir
(:func:`prepare_state_dir`, mode 0700, never inside the release nor containing it;
:func:`write_proxy_map`). :mod:`pfd.data.release_lint` checks a release for leaks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from pfd.data.shape import plain_size
from pfd.errors import PfdError
from pfd.io import atomic_write_bytes, atomic_write_json, path_within, sha256_bytes, sha256_file

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "MANIFEST_KEYS",
    "CHECK_NAMES",
    "PROXY_MAP",
    "STATE_MARKER",
    "clear_interrupted_release",
    "read_marker",
    "check_same_run",
    "WrittenRelease",
    "write_release",
    "read_manifest",
    "encode_png",
    "to_uint8",
    "label_permutation",
    "looks_ordered",
    "check_outside_release",
    "check_separate",
    "prepare_state_dir",
    "secure_state_dir",
    "write_proxy_map",
    "read_proxy_map",
]

FORMAT = "pfd-release"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: The proxy -> source map in the state dir.
PROXY_MAP = "proxy_map.json"
_TMP = re.compile(r"^\..+\.tmp$")  # leftovers of pfd.io.atomic_open after a kill
#: Every key a manifest may hold (the documented schema).
#: Names of the publication gate's checks (:mod:`pfd.distill.gate`), the only keys of ``checks``.
CHECK_NAMES = frozenset({"ogp_margin", "judge_competence"} | {
    f"{who}_{attack}" for who in ("insider", "public", "judge")
    for attack in ("vismatch", "reid", "vismatch_csls", "reid_csls")})  # pfd.distill.gate.ATTACKS per model

MANIFEST_KEYS = frozenset(
    {"format", "format_version", "method", "run_id", "image_size", "num_classes", "num_images", "images_per_class", "files",
     "checks"}
)
#: The marker of a pfd state dir, the first file every run writes into it (:mod:`pfd.distill.claim`):
#: ``{"format": "pfd-state", "format_version": 1, "run_id": <hex>}``; the release's manifest names the
#: same run id, which is how a release and the state dir of the run that wrote it are paired.
STATE_MARKER = "pfd-state.json"
MARKER_FORMAT = "pfd-state"
#: Modes of the published files and folders (readable by everyone: it is the public artefact).
RELEASE_FILE_MODE, RELEASE_DIR_MODE = 0o644, 0o755
#: Modes of everything in the state dir.
STATE_FILE_MODE, STATE_DIR_MODE = 0o600, 0o700
#: How pfd names release folders and files (``0007/003.png``).
LABEL_NAME_RE = re.compile(r"^\d{4,}$")
PNG_NAME_RE = re.compile(r"^\d{3,}\.png$")


# --------------------------------------------------------------------------------------------
# Pixels and PNG bytes
# --------------------------------------------------------------------------------------------


def to_uint8(proxies: torch.Tensor | np.ndarray) -> np.ndarray:
    """Quantise ``(n, 3, H, W)`` floats in [0, 1] (or uint8) to uint8 ``(n, H, W, 3)``.

    Floats are rounded to the nearest level (``round(255 x)``), values outside [0, 1] clipped.

    Raises:
        ValueError: On a wrong shape or non-finite values.
    """
    x = proxies.detach().cpu().numpy() if isinstance(proxies, torch.Tensor) else np.asarray(proxies)
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"proxies must be (n, 3, H, W), got {x.shape}")
    if x.dtype != np.uint8:
        x = x.astype(np.float64)
        if not np.isfinite(x).all():
            raise ValueError("proxies contain NaN or infinite values")
        x = np.clip(np.round(x * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def encode_png(img: np.ndarray) -> bytes:
    """PNG bytes of one ``(H, W, 3)`` uint8 image with no metadata chunks, deterministically."""
    buf = io.BytesIO()
    Image.fromarray(img, mode="RGB").save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------


def looks_ordered(labels: Sequence[float] | np.ndarray, sources: Sequence[float] | np.ndarray) -> bool:
    """Whether labels follow the source order: a release must never do this.

    True when the Spearman rank correlation between the labels and the source identities is
    ±1 (same or reversed order, from 3 classes up) or ``|ρ| ≥ max(0.5, 4/√(n−1))`` (more than
    4 standard deviations from a random permutation, and at least a strong correlation).
    """
    a = np.asarray(labels, dtype=np.float64)
    b = np.asarray(sources, dtype=np.float64)
    n = len(a)
    if n < 3:
        return False
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    rho = float((ra * rb).sum() / np.sqrt((ra**2).sum() * (rb**2).sum()))
    return abs(rho) >= 1 - 1e-9 or abs(rho) >= max(0.5, 4.0 / np.sqrt(n - 1))


def label_permutation(num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Label index of each internal class: a permutation that does not :func:`looks_ordered`."""
    perm = rng.permutation(num_classes)
    for _ in range(1000):
        if not looks_ordered(perm, np.arange(num_classes)):
            break
        perm = rng.permutation(num_classes)
    return perm


# --------------------------------------------------------------------------------------------
# Writing and reading a release
# --------------------------------------------------------------------------------------------


@dataclass
class WrittenRelease:
    """What :func:`write_release` wrote; everything but ``manifest`` belongs in the state dir.

    Attributes:
        root: The release folder.
        manifest: The manifest written to ``root/manifest.json``.
        files: Per proxy index, its path relative to ``root`` (``"0007/003.png"``).
        labels: Per proxy index, its released label (``"0007"``).
        class_label: Internal class -> released label.
    """

    root: Path
    manifest: dict[str, Any]
    files: list[str]
    labels: list[str]
    class_label: dict[int, str]


def read_manifest(path: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of a pfd release folder, or ``None`` if it has none / is not pfd's."""
    p = Path(path) / MANIFEST
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _prepare_release_dir(out: Path, resume: bool, run_id: str | None = None) -> dict[str, Any] | None:
    """Check ``out`` can receive a release; return the previous manifest when resuming."""
    if out.exists() and not out.is_dir():
        raise PfdError(f"{out}: exists and is not a folder; choose another --out")
    if not out.exists() or not any(out.iterdir()):
        return None
    old = read_manifest(out)
    if old is None:
        raise PfdError(f"{out}: not empty and not a pfd release; choose an empty or new folder for --out")
    if not resume:
        raise PfdError(f"{out}: already holds a pfd release; pass --resume to continue that run or choose another --out")
    if run_id is not None and old.get("run_id") != run_id:
        raise PfdError(f"{out}: holds the release of another run; it is left untouched: choose another --out")
    listed = set(old.get("files", {})) | {MANIFEST}
    for dirpath, dirnames, filenames in os.walk(out):
        for name in filenames:
            rel = Path(dirpath, name).relative_to(out).as_posix()
            if rel not in listed and not _TMP.match(name):
                raise PfdError(
                    f"{out / rel}: not part of the previous pfd release in {out}; remove it or choose another --out"
                )
    return old


def write_release(
    out: str | os.PathLike,
    proxies: torch.Tensor | np.ndarray,
    proxy_class: Sequence[int] | np.ndarray | torch.Tensor,
    *,
    method: str,
    label_seed: int,
    run_id: str | None = None,
    checks: Mapping[str, bool] | None = None,
    state_dir: str | os.PathLike | None = None,
    resume: bool = False,
    avoid_labels: Iterable[str] = (),
) -> WrittenRelease:
    """Write proxies as ``OUT/<label>/<k>.png`` with arbitrary labels, and the manifest.

    Every PNG and the manifest are written atomically; the manifest is written last, so a
    folder with a manifest is a complete release. Re-running with the same inputs (``resume``)
    rewrites nothing that is already identical and yields byte-identical files.

    Args:
        out: Release folder (created; must be empty, or a previous pfd release with ``resume``).
        proxies: ``(n, 3, H, W)`` float in [0, 1] or uint8.
        proxy_class: Internal class of each proxy ``(n,)`` (any integers; order = internal order).
        method: Method name recorded in the manifest (``pfd``, ``rta-only``, ``sre2l``, ``raw``).
        label_seed: Seed of the label permutation and in-class shuffles (not written to the
            release; keep it in the state dir).
        run_id: The run id of the state dir (:mod:`pfd.distill.claim`), recorded in the manifest;
            with ``resume`` a previous release must carry the same one.
        checks: The publication gate's verdicts (:data:`CHECK_NAMES` -> passed), recorded in the
            manifest so that a reader sees which of pfd's own checks the release passed.
        state_dir: If given, refuse when it lies inside the release or contains it.
        resume: Allow replacing a previous pfd release in ``out``.
        avoid_labels: Names a label must never equal: the private identity names. Labels are
            zero-padded numbers; when one of a width would equal such a name (identities named
            ``0000``, ``0001``, ...) they are written one digit wider, so that no label reads as
            a source name (the lint would rightly flag it).

    Returns:
        The manifest and the proxy -> (label, file) mapping.

    Raises:
        PfdError: If ``out`` is not usable, overlaps ``state_dir``, is being written by another
            process, or the proxies make fewer than two classes.
    """
    out = Path(out)
    if state_dir is not None:
        check_separate(out, state_dir)
    imgs = to_uint8(proxies)  # (n, H, W, 3)
    cls = np.asarray(proxy_class.cpu() if isinstance(proxy_class, torch.Tensor) else proxy_class, dtype=np.int64)
    if len(cls) != len(imgs):
        raise ValueError(f"{len(imgs)} proxies but {len(cls)} classes")
    if len(np.unique(cls)) < 2:
        raise PfdError(f"{out}: a release needs at least 2 identities, got {len(np.unique(cls))}; add identities to the private set")
    _prepare_release_dir(out, resume, run_id)
    out.mkdir(parents=True, exist_ok=True)
    with _folder_lock(out):
        old = _prepare_release_dir(out, resume, run_id)  # again, now that no one else writes here
        try:
            return _write_release(out, imgs, cls, method=method, label_seed=label_seed, run_id=run_id, old=old,
                                  checks=checks, avoid_labels=avoid_labels)
        except BaseException:
            if old is None:  # a new release that failed (a full disk, Ctrl-C): leave no half-written folder
                clear_interrupted_release(out)
            raise


def clear_interrupted_release(out: str | os.PathLike) -> None:
    """Remove a release that was left half-written (no manifest yet): by a kill, a full disk, Ctrl-C.

    Only a folder holding nothing but the release layout (``<label>/<k>.png`` and atomic-write
    leftovers) is cleared; a complete release (with its manifest) or a folder holding anything else
    is left untouched, for the release writer to refuse.
    """
    out = Path(out)
    if not out.is_dir() or (out / MANIFEST).exists() or (out / MANIFEST).is_symlink():
        return
    files = [p for p in out.rglob("*") if not p.is_dir()]

    def ours(p: Path) -> bool:
        rel = p.relative_to(out)
        return len(rel.parts) == 2 and LABEL_NAME_RE.match(rel.parts[0]) is not None and (
            _TMP.match(p.name) is not None or PNG_NAME_RE.match(p.name) is not None)

    if not files or not all(ours(p) for p in files):
        return
    for p in files:
        p.unlink(missing_ok=True)
    for d in sorted((p for p in out.iterdir() if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the folder itself (nothing is added to a release)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise PfdError(f"{folder}: another process is writing a release here; wait for it or choose another --out") from None
        yield
    finally:
        os.close(fd)


def _write_release(out: Path, imgs: np.ndarray, cls: np.ndarray, *, method: str, label_seed: int, run_id: str | None,
                   old: dict[str, Any] | None, checks: Mapping[str, bool] | None = None,
                   avoid_labels: Iterable[str] = ()) -> WrittenRelease:

    rng = np.random.default_rng(int(label_seed))
    classes = np.unique(cls)  # internal order
    perm = label_permutation(len(classes), rng)
    width = max(4, len(str(len(classes) - 1)))
    avoid = {str(a) for a in avoid_labels}
    while any(f"{int(p):0{width}d}" in avoid for p in perm):  # a label must not read as a source name
        width += 1
    counts = np.bincount(np.searchsorted(classes, cls), minlength=len(classes))
    kwidth = max(3, len(str(int(counts.max(initial=1)) - 1)))
    files: list[str] = [""] * len(cls)
    labels: list[str] = [""] * len(cls)
    class_label: dict[int, str] = {}
    for j, c in enumerate(classes):
        label = f"{int(perm[j]):0{width}d}"
        class_label[int(c)] = label
        members = np.flatnonzero(cls == c)
        for k, idx in enumerate(members[rng.permutation(len(members))]):
            files[idx] = f"{label}/{k:0{kwidth}d}.png"
            labels[idx] = label

    sums: dict[str, str] = {}
    for idx in range(len(cls)):
        data = encode_png(imgs[idx])
        digest = sha256_bytes(data)
        path = out / files[idx]
        if not (path.is_file() and sha256_file(path) == digest):
            atomic_write_bytes(path, data)
        sums[files[idx]] = digest
    per_class = {class_label[int(c)]: int(n) for c, n in zip(classes, counts)}
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "method": str(method),
        "image_size": plain_size(tuple(imgs.shape[1:3])),  # S, or [H, W] when not square
        "num_classes": int(len(classes)),
        "num_images": int(len(cls)),
        "images_per_class": dict(sorted(per_class.items())),
        "files": dict(sorted(sums.items())),
    }
    if run_id is not None:
        manifest["run_id"] = str(run_id)
    if checks is not None:
        unknown = set(checks) - CHECK_NAMES
        if unknown:
            raise ValueError(f"unknown publication checks {sorted(unknown)}")
        manifest["checks"] = {str(k): bool(v) for k, v in sorted(checks.items())}
    for rel in sums:
        os.chmod(out / rel, RELEASE_FILE_MODE)  # mkstemp made them 0600
    atomic_write_json(out / MANIFEST, manifest)
    os.chmod(out / MANIFEST, RELEASE_FILE_MODE)
    # Files of a previous release that this one does not have (and kill leftovers) go.
    stale = set(old.get("files", {})) - set(sums) if old else set()
    for rel in stale:
        (out / rel).unlink(missing_ok=True)
    for dirpath, _, filenames in os.walk(out):
        for name in filenames:
            if _TMP.match(name):
                Path(dirpath, name).unlink(missing_ok=True)
    for d in sorted((p for p in out.iterdir() if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
        else:
            os.chmod(d, RELEASE_DIR_MODE)
    os.chmod(out, RELEASE_DIR_MODE)
    return WrittenRelease(out, manifest, files, labels, class_label)


def read_marker(state_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The marker of a pfd state dir (:data:`STATE_MARKER`), or ``None`` if it has none (or an unreadable one)."""
    p = Path(state_dir) / STATE_MARKER
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != MARKER_FORMAT or not isinstance(doc.get("run_id"), str):
        return None
    return doc


def check_same_run(release: str | os.PathLike, state_dir: str | os.PathLike, *, manifest: dict[str, Any] | None = None) -> None:
    """Refuse a state dir written by another run than the release (their run ids differ).

    Scoring a release against another run's proxy -> source map gives meaningless figures, and a
    lint against another run's state checks nothing about this release. A release or state dir
    that carries no run id (written before run ids existed) is not refused here.

    Raises:
        PfdError: Naming both run ids and what to pass instead.
    """
    manifest = read_manifest(release) if manifest is None else manifest
    marker = read_marker(state_dir)
    ours = manifest.get("run_id") if manifest else None
    theirs = marker.get("run_id") if marker else None
    if ours and theirs and ours != theirs:
        raise PfdError(f"{state_dir}: the state dir of run {theirs[:12]}, but {release} was written by run {ours[:12]}; "
                       "pass the --state-dir of the run that wrote this release")


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


def write_proxy_map(
    state_dir: str | os.PathLike,
    written: WrittenRelease,
    *,
    proxy_source: Sequence[int] | np.ndarray | torch.Tensor,
    identities: Sequence[str] | None = None,
    label_seed: int,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write the proxy -> source map (private) to ``state_dir/proxy_map.json``.

    Args:
        state_dir: A folder made by :func:`prepare_state_dir`.
        written: The result of :func:`write_release`.
        proxy_source: Source identity label of each proxy ``(n,)``.
        identities: Source identity names (label -> name), optional.
        label_seed: The release's label seed (it undoes the permutation: private).
        extra: More private fields.

    Returns:
        The path written.
    """
    src = np.asarray(proxy_source.cpu() if isinstance(proxy_source, torch.Tensor) else proxy_source, dtype=np.int64)
    if len(src) != len(written.files):
        raise ValueError(f"{len(written.files)} proxies but {len(src)} sources")
    proxies = []
    for i, (f, lab, s) in enumerate(zip(written.files, written.labels, src)):
        row: dict[str, Any] = {"index": i, "file": f, "label": lab, "source": int(s)}
        if identities is not None:
            row["source_name"] = str(identities[int(s)])
        proxies.append(row)
    doc: dict[str, Any] = {
        "release": str(Path(written.root).resolve()),
        "label_seed": int(label_seed),
        "class_label": {str(k): v for k, v in written.class_label.items()},
        "proxies": proxies,
    }
    if extra:
        doc["extra"] = dict(extra)
    path = Path(state_dir) / PROXY_MAP
    atomic_write_json(path, doc)
    return path


def read_proxy_map(state_dir: str | os.PathLike) -> dict[str, Any]:
    """Read ``state_dir/proxy_map.json``.

    Raises:
        PfdError: If it is missing or unreadable.
    """
    path = Path(state_dir) / PROXY_MAP
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise PfdError(f"{path}: no proxy map; pass the --state-dir that pfd distill wrote") from None
    except ValueError as e:
        raise PfdError(f"{path}: not valid JSON ({e}); the state dir is damaged") from None
