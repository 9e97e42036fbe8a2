"""``pfd release lint``: check a release folder for anything that links it back to its source.

A clean release holds ``manifest.json`` and ``<digits>/<digits>.png`` files only, each PNG made of
IHDR/PLTE/IDAT/IEND/tRNS chunks (pixels, palette, transparency), every file listed in the manifest
with a matching sha256, and no name of a source identity or source file anywhere. With the state
dir, labels must not follow the source identity order and the state dir must be private (0700) and
outside the release.

Each problem is a :class:`Finding`; an empty list means the release passed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from pfd.data.faceset import FaceSet
from pfd.data.release import FORMAT, MANIFEST, PROXY_MAP, check_separate, looks_ordered
from pfd.errors import PfdError
from pfd.io import sha256_file

__all__ = ["Finding", "lint_release", "format_findings", "png_chunks", "ALLOWED_PNG_CHUNKS", "STATE_SUFFIXES"]

#: Chunks that carry pixels only. Everything else (tEXt, zTXt, iTXt, tIME, pHYs, eXIf, iCCP, gAMA,
#: sRGB, cHRM, sBIT, bKGD, hIST, sPLT, private chunks...) is metadata and fails the lint.
ALLOWED_PNG_CHUNKS = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS"})
#: File suffixes of private state (checkpoints, arrays, configs, tables).
STATE_SUFFIXES = frozenset(
    {".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".npy", ".npz", ".pkl", ".pickle", ".json", ".toml",
     ".yaml", ".yml", ".csv", ".tsv", ".txt", ".log", ".h5", ".onnx", ".rec", ".idx", ".lst"}
)  # fmt: skip
_PNG_SIG = b"\x89PNG\r\n\x1a\n"
_LABEL = re.compile(r"^\d+$")
_FILE = re.compile(r"^\d+\.png$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FILEISH = re.compile(r"(\.(jpe?g|png|bmp|webp|tiff?|gif|heic)$)|[/\\]", re.IGNORECASE)
_MANIFEST_KEYS = {"format", "format_version", "method", "image_size", "num_classes", "num_images", "images_per_class", "files", "extra"}
#: Words every release contains; a source name inside one of them (``png``, ``raw``) says nothing.
_VOCAB = " ".join(sorted(_MANIFEST_KEYS | {FORMAT, "png", "pfd", "rta-only", "sre2l", "raw", "dp-pix", "blur", "manifest.json"}))


@dataclass(frozen=True)
class Finding:
    """One leak or defect.

    Attributes:
        kind: ``state-file``, ``unexpected-file``, ``png-metadata``, ``png-corrupt``,
            ``checksum``, ``unlisted-file``, ``missing-file``, ``manifest``, ``source-name``,
            ``label-order``, ``state-dir-inside`` or ``state-dir-mode``.
        path: The offending path (relative to the release where possible).
        detail: What is wrong and what to do.
    """

    kind: str
    path: str
    detail: str


def png_chunks(data: bytes) -> list[tuple[bytes, int]]:
    """The ``(type, length)`` of every chunk of a PNG, and ``(b"<trailing>", n)`` for bytes after IEND.

    Raises:
        ValueError: If the signature, a length or a CRC is wrong, or IEND is missing.
    """
    if not data.startswith(_PNG_SIG):
        raise ValueError("not a PNG signature")
    pos, out = len(_PNG_SIG), []
    while True:
        if pos + 8 > len(data):
            raise ValueError("truncated before IEND")
        length, ctype = struct.unpack(">I4s", data[pos : pos + 8])
        end = pos + 12 + length
        if end > len(data):
            raise ValueError(f"chunk {ctype!r} runs past the end of the file")
        crc = struct.unpack(">I", data[pos + 8 + length : end])[0]
        if zlib.crc32(data[pos + 4 : pos + 8 + length]) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad CRC in chunk {ctype!r}")
        out.append((ctype, length))
        pos = end
        if ctype == b"IEND":
            break
    if pos < len(data):
        out.append((b"<trailing>", len(data) - pos))
    return out


def _strings(obj: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string (keys included) of a JSON document, with its location."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            loc = f"{where}.{k}" if where else str(k)
            yield loc, str(k)
            yield from _strings(v, loc)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _strings(v, f"{where}[{i}]")
    elif isinstance(obj, str):
        yield where, obj


def _distinctive(token: str) -> bool:
    """Long enough and not just digits/punctuation: a substring match then means something."""
    return len(token) >= 3 and re.search(r"[^\d\W_]", token) is not None


def _source_tokens(private: FaceSet) -> tuple[set[str], set[str]]:
    """(distinctive tokens to search as substrings, short/numeric identity names)."""
    tokens: set[str] = set()
    plain: set[str] = set()
    for ident in private.identities:
        if _distinctive(ident):
            tokens.add(ident.lower())
        else:
            plain.add(ident)
    for name in private.names:
        base = name.replace("\\", "/").rsplit("/", 1)[-1]
        stem = base.rsplit(".", 1)[0]
        for t in (base, stem):
            if _distinctive(t) and not re.fullmatch(r"[\d\W_]*(png|jpe?g|bmp|webp)?", t.lower()):
                tokens.add(t.lower())
    return {t for t in tokens if t not in _VOCAB}, plain


def _check_tree(root: Path, manifest: dict[str, Any] | None, findings: list[Finding]) -> list[str]:
    """File-level checks; returns the release-relative paths seen."""
    listed: dict[str, str] = manifest.get("files", {}) if manifest else {}
    seen: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        for d in sorted(dirnames):
            rel = (here / d).relative_to(root).as_posix()
            if (here / d).is_symlink():
                findings.append(Finding("unexpected-file", rel + "/", "symlinked folder; a release holds plain files only"))
            elif depth > 0:
                findings.append(Finding("unexpected-file", rel + "/", "nested folder; a release is <label>/<k>.png only"))
            elif not _LABEL.match(d):
                findings.append(Finding("source-name", rel + "/", "label folder is not a number; names can identify the source"))
        for f in sorted(filenames):
            p = here / f
            rel = p.relative_to(root).as_posix()
            seen.append(rel)
            suffix = p.suffix.lower()
            if rel == MANIFEST:
                continue
            if p.is_symlink():
                findings.append(Finding("unexpected-file", rel, "symlink; a release holds plain files only"))
                continue
            if suffix in STATE_SUFFIXES or f == PROXY_MAP:
                findings.append(Finding("state-file", rel, "private state file inside the release; delete it and keep state in --state-dir"))
                continue
            if suffix != ".png" or depth != 1:
                findings.append(Finding("unexpected-file", rel, "not <label>/<k>.png; remove it from the release"))
                continue
            if not _FILE.match(f):
                findings.append(Finding("source-name", rel, "image file name is not a number; names can identify the source"))
            data = p.read_bytes()
            try:
                extra = sorted({c.decode("latin-1") for c, _ in png_chunks(data) if c not in ALLOWED_PNG_CHUNKS})
            except ValueError as e:
                findings.append(Finding("png-corrupt", rel, f"unreadable PNG ({e}); rewrite the release"))
                continue
            if extra:
                findings.append(Finding("png-metadata", rel, f"metadata chunks {', '.join(extra)}; re-encode without metadata"))
            if rel not in listed:
                findings.append(Finding("unlisted-file", rel, "not in manifest.json; remove it or rewrite the release"))
            elif sha256_file(p) != listed[rel]:
                findings.append(Finding("checksum", rel, "sha256 differs from manifest.json; the file was altered"))
    for rel in sorted(set(listed) - set(seen)):
        findings.append(Finding("missing-file", rel, "listed in manifest.json but missing"))
    return seen


def _check_manifest(root: Path, findings: list[Finding]) -> dict[str, Any] | None:
    p = root / MANIFEST
    if not p.is_file():
        findings.append(Finding("manifest", MANIFEST, "missing; write the release with pfd distill"))
        return None
    try:
        manifest = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as e:
        findings.append(Finding("manifest", MANIFEST, f"not valid JSON ({e})"))
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        findings.append(Finding("manifest", MANIFEST, f"not a {FORMAT} manifest"))
        return manifest if isinstance(manifest, dict) else None
    for key in sorted(set(manifest) - _MANIFEST_KEYS):
        findings.append(Finding("manifest", f"{MANIFEST}:{key}", "unexpected field; the manifest holds counts, size, method and checksums only"))
    files = manifest.get("files", {})
    for loc, s in _strings(manifest):
        if loc.startswith("files.") and (s in files or _HEX64.match(s)):
            continue  # a listed release path or its checksum
        if loc.startswith("images_per_class.") and _LABEL.match(s):
            continue
        if _FILEISH.search(s):
            findings.append(Finding("source-name", f"{MANIFEST}:{loc}", f"mentions a file or path {s!r}; remove it"))
    return manifest


def lint_release(
    path: str | os.PathLike, *, private: FaceSet | None = None, state_dir: str | os.PathLike | None = None
) -> list[Finding]:
    """All leaks and defects of a release (empty: fit to publish).

    Args:
        path: Release folder.
        private: The private source set; its identity and file names must appear nowhere.
        state_dir: The publisher's state dir: enables the label-order check against the
            proxy -> source map, the 0700 mode check and the overlap check.

    Returns:
        The findings, in a stable order.

    Raises:
        PfdError: If ``path`` or ``state_dir`` is not a folder.
    """
    root = Path(path)
    if not root.is_dir():
        raise PfdError(f"{root}: no such release folder")
    findings: list[Finding] = []
    manifest = _check_manifest(root, findings)
    seen = _check_tree(root, manifest, findings)

    labels = sorted(p.name for p in root.iterdir() if p.is_dir())
    if private is not None:
        tokens, plain = _source_tokens(private)
        texts = [(rel, rel) for rel in seen] + [(rel + "/", rel) for rel in labels]
        if manifest is not None:
            texts += [(f"{MANIFEST}:{loc}", s) for loc, s in _strings(manifest) if not _HEX64.match(s)]
        for where, text in texts:
            low = text.lower()
            hits = sorted(t for t in tokens if t in low)
            if hits:
                findings.append(Finding("source-name", where, f"contains source name(s) {', '.join(hits[:3])}; remove them"))
        same = [lab for lab in labels if lab in plain]
        if labels and len(same) > len(labels) / 2:
            findings.append(
                Finding("source-name", "./", f"{len(same)} of {len(labels)} labels equal source identity names; relabel the release")
            )

    if state_dir is not None:
        sd = Path(state_dir)
        if not sd.is_dir():
            raise PfdError(f"{sd}: no such state dir; pass the --state-dir that pfd distill wrote")
        try:
            check_separate(root, sd)
        except PfdError as e:
            findings.append(Finding("state-dir-inside", str(sd), str(e)))
        mode = stat.S_IMODE(sd.stat().st_mode)
        if mode & 0o077:
            findings.append(Finding("state-dir-mode", str(sd), f"mode {mode:04o} lets others read private state; chmod 700 {sd}"))
        _check_label_order(sd, private, findings)
    return findings


def _check_label_order(state_dir: Path, private: FaceSet | None, findings: list[Finding]) -> None:
    """Labels vs source identities through the state dir's proxy -> source map."""
    p = state_dir / PROXY_MAP
    if not p.is_file():
        return
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
        pairs = {(str(r["label"]), int(r["source"])) for r in doc["proxies"]}
    except (ValueError, KeyError, TypeError) as e:
        raise PfdError(f"{p}: unreadable proxy map ({e}); the state dir is damaged") from None
    by_label: dict[str, int] = {}
    for lab, src in sorted(pairs):
        by_label.setdefault(lab, src)
    labs = sorted(by_label)
    lab_key = [int(lab) if _LABEL.match(lab) else i for i, lab in enumerate(labs)]
    if looks_ordered(np.asarray(lab_key), np.asarray([by_label[lab] for lab in labs])):
        findings.append(Finding("label-order", "./", "labels follow the source identity order; redraw the label permutation"))
    if private is not None:
        for lab in labs:
            src = by_label[lab]
            if 0 <= src < len(private.identities) and private.identities[src] == lab:
                findings.append(Finding("source-name", lab + "/", "label equals its source identity's name; relabel the release"))


def format_findings(findings: list[Finding]) -> str:
    """A plain-text table: kind, path, detail."""
    rows = [("KIND", "PATH", "DETAIL")] + [(f.kind, f.path, f.detail) for f in findings]
    w0 = max(len(r[0]) for r in rows)
    w1 = min(max(len(r[1]) for r in rows), 48)
    return "\n".join(f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows)
