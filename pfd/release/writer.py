"""Writing a release: the proxies as ``OUT/<label>/<k>.png`` with arbitrary labels, then the manifest.

The format is :mod:`pfd.release.format`'s. Every PNG and the manifest are written atomically and
the manifest last, so a folder with a manifest is a complete release; only one process writes
into a release folder at a time (an ``flock`` on the folder). The proxy -> source map, the label
seed and everything else private go to the state dir (:func:`write_proxy_map`;
:mod:`pfd.release.state_dir`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from pfd.data.shape import plain_size
from pfd.errors import PfdError
from pfd.io import atomic_write_bytes, atomic_write_json, sha256_bytes, sha256_file
from pfd.release.format import (
    AUDIT_KEYS,
    CARD,
    CardEntry,
    FORMAT,
    FORMAT_VERSION,
    LABEL_NAME_RE,
    MANIFEST,
    PNG_NAME_RE,
    Manifest,
    RELEASE_DIR_MODE,
    RELEASE_FILE_MODE,
    TMP_NAME_RE,
    encode_png,
    label_permutation,
    read_manifest,
    to_uint8,
)
from pfd.release.state_dir import PROXY_MAP, ProxyMap, ProxyRow, check_separate, record_digest

__all__ = ["WrittenRelease", "write_release", "release_layout", "clear_interrupted_release", "write_proxy_map"]


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
    manifest: Manifest
    files: list[str]
    labels: list[str]
    class_label: dict[int, str]



def _prepare_release_dir(out: Path, resume: bool, run_id: str | None = None) -> Manifest | None:
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
    listed = set(old.get("files", {})) | {MANIFEST} | ({CARD} if old.get("card") else set())
    for dirpath, dirnames, filenames in os.walk(out):
        for name in filenames:
            rel = Path(dirpath, name).relative_to(out).as_posix()
            if rel not in listed and not TMP_NAME_RE.match(name):
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
    audit: Mapping[str, Any] | None = None,
    state_dir: str | os.PathLike | None = None,
    resume: bool = False,
    avoid_labels: Iterable[str] = (),
    card: str | None = None,
) -> WrittenRelease:
    """Write proxies as ``OUT/<label>/<k>.png`` with arbitrary labels, the dataset card, and the manifest.

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
        audit: The audit's verdict in aggregates (:data:`AUDIT_KEYS`: version, level, figures,
            largest rate / chance, publishable), recorded in the manifest so that whoever downloads
            the release sees what it passed.
        state_dir: If given, refuse when it lies inside the release or contains it.
        resume: Allow replacing a previous pfd release in ``out``.
        avoid_labels: Names a label must never equal: the private identity names. Labels are
            zero-padded numbers; when one of a width would equal such a name (identities named
            ``0000``, ``0001``, ...) they are written one digit wider, so that no label reads as
            a source name (the lint would rightly flag it).
        card: The dataset card's text (:func:`pfd.release.dataset_card.dataset_card`), written as
            ``README.md`` after the images and listed in the manifest with its sha256; ``None``: no card.

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
                                  audit=audit, avoid_labels=avoid_labels, card=card)
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
        if len(rel.parts) == 1 and (p.name == CARD or (TMP_NAME_RE.match(p.name) is not None and CARD in p.name)):
            return True  # the dataset card, written before the manifest
        return len(rel.parts) == 2 and LABEL_NAME_RE.match(rel.parts[0]) is not None and (
            TMP_NAME_RE.match(p.name) is not None or PNG_NAME_RE.match(p.name) is not None)

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



def release_layout(cls: np.ndarray, *, label_seed: int, avoid_labels: Iterable[str] = ()
                   ) -> tuple[list[str], list[str], dict[int, str]]:
    """Where each proxy goes in the release (pure): ``(files, labels, class_label)``.

    Labels are an arbitrary permutation of the classes (``label_seed``), zero-padded and one digit
    wider when one would read as a name in ``avoid_labels``; within a class the files are shuffled.
    The audit of a release still in memory orders its proxies by these names, as a reader of the
    written release does, so both see the same order.

    Args:
        cls: ``(n,)`` internal class of each proxy.
        label_seed: Seed of the permutation and the in-class shuffles.
        avoid_labels: Names a label must never equal.

    Returns:
        ``files`` (``"<label>/<k>.png"`` per proxy), ``labels`` per proxy, ``{class: label}``.
    """
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
    return files, labels, class_label


def _write_release(out: Path, imgs: np.ndarray, cls: np.ndarray, *, method: str, label_seed: int, run_id: str | None,
                   old: Manifest | None, audit: Mapping[str, Any] | None = None,
                   avoid_labels: Iterable[str] = (), card: str | None = None) -> WrittenRelease:

    files, labels, class_label = release_layout(cls, label_seed=label_seed, avoid_labels=avoid_labels)
    classes = np.unique(cls)  # internal order
    counts = np.bincount(np.searchsorted(classes, cls), minlength=len(classes))

    sums: dict[str, str] = {}
    for idx in range(len(cls)):
        data = encode_png(imgs[idx])
        digest = sha256_bytes(data)
        path = out / files[idx]
        if not (path.is_file() and sha256_file(path) == digest):
            atomic_write_bytes(path, data)
        sums[files[idx]] = digest
    per_class = {class_label[int(c)]: int(n) for c, n in zip(classes, counts)}
    manifest = Manifest(
        format=FORMAT, format_version=FORMAT_VERSION, method=str(method),
        image_size=plain_size(tuple(imgs.shape[1:3])),  # S, or [H, W] when not square
        num_classes=int(len(classes)), num_images=int(len(cls)), images_per_class=dict(sorted(per_class.items())),
        files=dict(sorted(sums.items())),
    )  # fmt: skip
    if run_id is not None:
        manifest["run_id"] = str(run_id)
    if audit is not None:
        unknown = set(audit) - AUDIT_KEYS
        if unknown:
            raise ValueError(f"not an audit summary field: {sorted(unknown)}")
        manifest["audit"] = {str(k): audit[k] for k in sorted(audit)}
    if card is not None:  # after the images, before the manifest: a folder with a manifest is complete
        data = card.encode("utf-8")
        atomic_write_bytes(out / CARD, data)
        os.chmod(out / CARD, RELEASE_FILE_MODE)
        manifest["card"] = CardEntry(file=CARD, sha256=sha256_bytes(data))
    elif old and old.get("card"):  # re-published without a card: the old one goes
        (out / CARD).unlink(missing_ok=True)
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
            if TMP_NAME_RE.match(name):
                Path(dirpath, name).unlink(missing_ok=True)
    for d in sorted((p for p in out.iterdir() if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
        else:
            os.chmod(d, RELEASE_DIR_MODE)
    os.chmod(out, RELEASE_DIR_MODE)
    return WrittenRelease(out, manifest, files, labels, class_label)



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
    proxies: list[ProxyRow] = []
    for i, (f, lab, s) in enumerate(zip(written.files, written.labels, src)):
        row = ProxyRow(index=i, file=f, label=lab, source=int(s))
        if identities is not None:
            row["source_name"] = str(identities[int(s)])
        proxies.append(row)
    doc = ProxyMap(release=str(Path(written.root).resolve()), label_seed=int(label_seed),
                   class_label={str(k): v for k, v in written.class_label.items()}, proxies=proxies)
    if extra:
        doc["extra"] = dict(extra)
    path = Path(state_dir) / PROXY_MAP
    atomic_write_json(path, doc)
    record_digest(state_dir, PROXY_MAP)  # readers refuse a map edited after this point
    return path

