"""``pfd release lint``: check a release folder for anything that links it back to its source.

A clean release holds ``manifest.json`` and ``<digits>/<digits>.png`` files only -- plain files,
no symlinks, no hard links, mode 0644 in 0755 folders -- and at least one image. Each PNG is what
pfd writes: an 8-bit RGB image of the manifest's size, made of IHDR, IDAT and IEND chunks only,
whose IDAT data is exactly one zlib stream of exactly the image's pixel rows (nothing hidden after
it, nothing after IEND). Every file is listed in the manifest with a matching sha256; the manifest
holds the documented keys only (:data:`~pfd.release.format.MANIFEST_KEYS`) with consistent counts;
no name of a source identity or source file appears anywhere. With ``private``, no released
image may be a private photo, exact, near-duplicate or edited (rotated, cropped, pasted...:
:mod:`pfd.release.private_copies`). With
the state dir, labels must not follow the source identity order, and the state dir must be
outside the release with every folder 0700 and every file 0600.

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
from pfd.release.format import (
    AUDIT_KEYS,
    CARD,
    FORMAT,
    looks_ordered,
    MANIFEST,
    MANIFEST_KEYS,
    RELEASE_DIR_MODE,
    RELEASE_FILE_MODE,
)
from pfd.release.state_dir import PROXY_MAP, check_same_run, check_separate, read_proxy_map, release_sources
from pfd.data.shape import pil_size
from pfd.errors import PfdError
from pfd.io import sha256_file
from PIL import Image
from pfd.release.private_copies import find_private_copies
from pfd.release.dataset_card import card_vocabulary

__all__ = [
    "Finding", "lint_release", "format_findings", "png_chunks", "check_png", "ALLOWED_PNG_CHUNKS", "STATE_SUFFIXES",
]  # fmt: skip

#: Chunks pfd writes: pixels only. Everything else (tEXt, zTXt, iTXt, tIME, pHYs, eXIf, iCCP, gAMA,
#: sRGB, cHRM, sBIT, bKGD, hIST, sPLT, PLTE and tRNS in an RGB image, private chunks...) can carry
#: data that is not the image and fails the lint.
ALLOWED_PNG_CHUNKS = frozenset({b"IHDR", b"IDAT", b"IEND"})
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
_MANIFEST_KEYS = set(MANIFEST_KEYS)
#: Words every release contains; a source name inside one of them (``png``, ``pfd``) says nothing. The
#: release's own method name (``raw``, ``blur``, ...) joins them when its manifest names one.
_VOCAB = " ".join(sorted(_MANIFEST_KEYS | {FORMAT, "png", "pfd", "manifest.json"}))


@dataclass(frozen=True)
class Finding:
    """One leak or defect.

    Attributes:
        kind: ``state-file``, ``unexpected-file``, ``link``, ``png-metadata``, ``png-corrupt``,
            ``image-size``, ``checksum``, ``unlisted-file``, ``missing-file``, ``manifest``,
            ``empty`` (no image, or one identity), ``release-mode``, ``source-name``, ``private-image``, ``label-order``,
            ``state-dir-inside``, ``state-dir-mode``, ``other-run`` (the state dir's run id is not the
            release's, or either has none), ``proxy-map`` (the release's files are not the proxy map's)
            or ``audit-refused`` (the manifest records an audit that refused the release).
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


def check_png(data: bytes, *, size: int | tuple[int, int] | list[int] | None = None) -> list[tuple[str, str]]:
    """Everything in a PNG that is not an 8-bit RGB image as pfd writes it: ``[(kind, detail)]``.

    Besides chunks other than IHDR/IDAT/IEND and bytes after IEND (``png-metadata``), data can
    hide where pixels belong: IDAT chunks that are not contiguous, a zlib stream followed by more
    bytes, or more (or fewer) decompressed bytes than the image's rows. Those are
    ``png-metadata`` too; a header of another size than ``size`` is ``image-size``.

    Raises:
        ValueError: The file is not a readable PNG (see :func:`png_chunks`).
    """
    chunks = png_chunks(data)
    out: list[tuple[str, str]] = []
    extra = sorted({c.decode("latin-1") for c, _ in chunks if c not in ALLOWED_PNG_CHUNKS})
    if extra:
        out.append(("png-metadata", f"chunks that are not image data: {', '.join(extra)}; re-encode without them"))
    types = [c for c, _ in chunks]
    if types[0] != b"IHDR":
        raise ValueError("first chunk is not IHDR")
    w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    if size is not None and (w, h) != pil_size(size):
        want_w, want_h = pil_size(size)
        out.append(("image-size", f"{w}x{h} pixels (width x height), the manifest says {want_w}x{want_h}; rewrite the release"))
    if (depth, colour, interlace) != (8, 2, 0):
        out.append(("png-metadata", f"not the 8-bit RGB, non-interlaced PNG pfd writes (depth {depth}, colour type "
                                    f"{colour}, interlace {interlace}); re-encode it"))
        return out
    idat = [i for i, c in enumerate(types) if c == b"IDAT"]
    if not idat or idat != list(range(idat[0], idat[0] + len(idat))):
        out.append(("png-metadata", "IDAT chunks are not one contiguous run; re-encode it"))
        return out
    pos, stream = len(_PNG_SIG), b""
    for c, length in chunks:
        if c == b"IDAT":
            stream += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    z = zlib.decompressobj()
    try:
        raw = z.decompress(stream, h * (1 + 3 * w) + 1)
    except zlib.error as e:
        raise ValueError(f"IDAT data is not a zlib stream ({e})") from None
    if len(raw) != h * (1 + 3 * w) or not z.eof or z.unused_data or z.unconsumed_tail:
        out.append(("png-metadata", "IDAT holds data beyond the image's pixel rows; re-encode it"))
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


def _source_tokens(private: FaceSet, vocab: str = _VOCAB) -> tuple[set[str], set[str]]:
    """(distinctive tokens to search as substrings, short/numeric identity names); tokens inside
    ``vocab``, words every such release holds, are not searched."""
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
    return {t for t in tokens if t not in vocab}, plain


def _link_finding(p: Path, rel: str) -> Finding | None:
    """A symlink or a hard link: a release holds plain files that are nothing else too."""
    if p.is_symlink():
        return Finding("link", rel, "symlink; a release holds plain files only (copy the content in)")
    st = p.lstat()
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return Finding("link", rel, f"hard link ({st.st_nlink} names for one file; it may be a private file); "
                                    "replace it with a copy of its own")
    return None


def _check_tree(root: Path, manifest: dict[str, Any] | None, findings: list[Finding]) -> tuple[list[str], list[str]]:
    """File-level checks; returns the release-relative paths seen and the PNGs whose pixels are sound."""
    listed: dict[str, str] = manifest.get("files", {}) if manifest and isinstance(manifest.get("files"), dict) else {}
    size = manifest.get("image_size") if manifest and _is_size(manifest.get("image_size")) else None
    seen: list[str] = []
    images: list[str] = []
    rmode = stat.S_IMODE(root.stat().st_mode)
    if rmode != RELEASE_DIR_MODE:
        findings.append(Finding("release-mode", "./", f"folder mode {rmode:04o}; a release folder is 0755 (chmod 755)"))
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        for d in sorted(dirnames):
            rel = (here / d).relative_to(root).as_posix()
            if (here / d).is_symlink():
                findings.append(Finding("link", rel + "/", "symlinked folder; a release holds plain files only"))
                continue
            if depth > 0:
                findings.append(Finding("unexpected-file", rel + "/", "nested folder; a release is <label>/<k>.png only"))
            elif not _LABEL.match(d):
                findings.append(Finding("source-name", rel + "/", "label folder is not a number; names can identify the source"))
            dmode = stat.S_IMODE((here / d).stat().st_mode)
            if dmode != RELEASE_DIR_MODE:
                findings.append(Finding("release-mode", rel + "/", f"folder mode {dmode:04o}; release folders are 0755"))
        for f in sorted(filenames):
            p = here / f
            rel = p.relative_to(root).as_posix()
            seen.append(rel)
            suffix = p.suffix.lower()
            link = _link_finding(p, rel)
            if link is not None:
                findings.append(link)  # and check what it holds too: a link to a private photo is two problems
                if not p.exists():
                    continue  # a dangling symlink holds nothing
            fmode = stat.S_IMODE(p.stat().st_mode)
            if fmode != RELEASE_FILE_MODE:
                findings.append(Finding("release-mode", rel, f"file mode {fmode:04o}; release files are 0644 (readable by "
                                                             "everyone, writable by the owner only)"))
            if rel == MANIFEST:
                continue
            if rel == CARD:  # the dataset card: exactly the file the manifest lists, unchanged
                card = manifest.get("card") if manifest else None
                if not isinstance(card, dict) or card.get("file") != CARD:
                    findings.append(Finding("unexpected-file", rel, "a README.md the manifest does not list as the "
                                            "release's card; remove it (pfd distill writes the card)"))
                elif sha256_file(p) != card.get("sha256"):
                    findings.append(Finding("checksum", rel, "sha256 differs from manifest.json's card: the card was "
                                            "edited or swapped after publishing; publish again with pfd distill --resume"))
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
                problems = check_png(data, size=size)
            except ValueError as e:
                findings.append(Finding("png-corrupt", rel, f"unreadable PNG ({e}); rewrite the release"))
                continue
            findings.extend(Finding(kind, rel, detail) for kind, detail in problems)
            if not problems:
                images.append(rel)
            if rel not in listed:
                findings.append(Finding("unlisted-file", rel, "not in manifest.json; remove it or rewrite the release"))
            elif sha256_file(p) != listed[rel]:
                findings.append(Finding("checksum", rel, "sha256 differs from manifest.json; the file was altered"))
    for rel in sorted(set(listed) - set(seen)):
        findings.append(Finding("missing-file", rel, "listed in manifest.json but missing"))
    if manifest and isinstance(manifest.get("card"), dict) and CARD not in seen:
        findings.append(Finding("missing-file", CARD, "the card manifest.json lists is missing"))
    return seen, images


def _is_size(v: Any) -> bool:
    """A manifest image size: a positive int ``S``, or ``[H, W]`` of two positive ints (not square)."""
    def side(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x > 0

    return side(v) or (isinstance(v, list) and len(v) == 2 and all(side(x) for x in v) and v[0] != v[1])


def _check_schema(manifest: dict[str, Any], findings: list[Finding]) -> None:
    """Only the documented keys, of the documented types, with counts that add up."""
    for key in sorted(set(manifest) - _MANIFEST_KEYS):
        findings.append(Finding("manifest", f"{MANIFEST}:{key}", "not in the manifest schema (counts, size, method, run id, "
                                                               "checksums); it may carry private data: remove it"))
    if "image_size" in manifest and not _is_size(manifest["image_size"]):
        findings.append(Finding("manifest", f"{MANIFEST}:image_size", f"not an image size, S or [H, W] ({manifest['image_size']!r})"))
    ints = ("format_version", "num_classes", "num_images")
    for key in ints:
        if key in manifest and (not isinstance(manifest[key], int) or isinstance(manifest[key], bool) or manifest[key] < 0):
            findings.append(Finding("manifest", f"{MANIFEST}:{key}", f"not a count ({manifest[key]!r})"))
    for key in ("method", "run_id"):
        if key in manifest and not isinstance(manifest[key], str):
            findings.append(Finding("manifest", f"{MANIFEST}:{key}", "not a string"))
    if "run_id" in manifest and isinstance(manifest["run_id"], str) and not re.fullmatch(r"[0-9a-f]{8,64}", manifest["run_id"]):
        findings.append(Finding("manifest", f"{MANIFEST}:run_id", "not a random hex run id; it may carry data: rewrite the release"))
    audit = manifest.get("audit")
    if "audit" in manifest and not (isinstance(audit, dict) and set(audit) <= AUDIT_KEYS and all(
            v is None or isinstance(v, (bool, int, float)) for v in audit.values())):
        findings.append(Finding("manifest", f"{MANIFEST}:audit", "not the audit's aggregate verdict (numbers and "
                                                                "true/false only); it may carry data: rewrite the release"))
    card = manifest.get("card")
    if "card" in manifest and not (isinstance(card, dict) and set(card) == {"file", "sha256"} and card.get("file") == CARD
                                   and isinstance(card.get("sha256"), str) and _HEX64.match(card["sha256"])):
        findings.append(Finding("manifest", f"{MANIFEST}:card", f"not {{file: {CARD}, sha256}}; rewrite the release"))
    files, per = manifest.get("files"), manifest.get("images_per_class")
    if not isinstance(files, dict) or not all(isinstance(v, str) and _HEX64.match(v) for v in files.values()):
        findings.append(Finding("manifest", f"{MANIFEST}:files", "not a table of file -> sha256"))
        return
    if not isinstance(per, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in per.values()):
        findings.append(Finding("manifest", f"{MANIFEST}:images_per_class", "not a table of label -> count"))
        return
    counted = {}
    for rel in files:
        counted[rel.split("/", 1)[0]] = counted.get(rel.split("/", 1)[0], 0) + 1
    if (counted != per or manifest.get("num_images") != len(files) or manifest.get("num_classes") != len(per)):
        findings.append(Finding("manifest", MANIFEST, "counts (num_images, num_classes, images_per_class) do not match "
                                                      "the files listed; rewrite the release"))


def _check_manifest(root: Path, findings: list[Finding]) -> dict[str, Any] | None:
    p = root / MANIFEST
    if p.is_symlink():
        findings.append(Finding("link", MANIFEST, "symlink; the manifest must be a plain file of the release"))
        return None
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
    _check_schema(manifest, findings)
    files = manifest.get("files", {}) if isinstance(manifest.get("files"), dict) else {}
    for loc, s in _strings(manifest):
        if loc.startswith("files.") and (s in files or _HEX64.match(s)):
            continue  # a listed release path or its checksum
        if loc.startswith("images_per_class.") and _LABEL.match(s):
            continue
        if loc == "card.file" and s == CARD:
            continue
        if _FILEISH.search(s):
            findings.append(Finding("source-name", f"{MANIFEST}:{loc}", f"mentions a file or path {s!r}; remove it"))
    return manifest


def _decode(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


def _check_state_tree(sd: Path, findings: list[Finding]) -> None:
    """Every folder of the state dir 0700 and every file 0600: it holds the proxy -> source map."""
    mode = stat.S_IMODE(sd.stat().st_mode)
    if mode & 0o077:
        findings.append(Finding("state-dir-mode", str(sd), f"mode {mode:04o} lets others read private state; chmod 700 {sd}"))
    for dirpath, dirnames, filenames in os.walk(sd):
        for name in sorted(dirnames) + sorted(filenames):
            p = Path(dirpath, name)
            if p.is_symlink():
                continue
            m = stat.S_IMODE(p.stat().st_mode)
            if m & 0o077:
                want = "700" if p.is_dir() else "600"
                findings.append(Finding("state-dir-mode", str(p), f"mode {m:04o} lets others read private state; chmod {want} {p}"))


def lint_release(
    path: str | os.PathLike,
    *,
    private: FaceSet | None = None,
    state_dir: str | os.PathLike | None = None,
    model: Any | None = None,
) -> list[Finding]:
    """All leaks and defects of a release (empty: fit to publish).

    Args:
        path: Release folder.
        private: The private source set: its identity and file names must appear nowhere, and
            no released image may be one of its photos (exact or near-duplicate).
        state_dir: The publisher's state dir: enables the label-order check against the
            proxy -> source map, the mode checks of the whole state tree (0700 / 0600) and the
            overlap check.
        model: A face model for the embedding near-duplicate check (with ``private``); the CLI
            passes the state dir's ``public_model.pt``.

    Returns:
        The findings, in a stable order.

    Raises:
        PfdError: If ``path`` or ``state_dir`` is not a folder.
    """
    root = Path(path)
    if not root.is_dir():
        raise PfdError(f"{root}: no such release folder")
    findings: list[Finding] = []
    if root.is_symlink():
        findings.append(Finding("link", "./", "the release folder is a symlink; publish the folder itself"))
    manifest = _check_manifest(root, findings)
    if manifest is not None and isinstance(manifest.get("audit"), dict) and manifest["audit"].get("publishable") is False:
        # Issue 54: a release published with --allow-linkable passed lint while attack and card refuse it.
        findings.append(Finding("audit-refused", f"{MANIFEST}:audit", "the audit refused this release (publishable: "
                                "false; it was published with --allow-linkable): pfd attack and pfd card refuse it too; "
                                "distill again until the audit passes"))
    seen, images = _check_tree(root, manifest, findings)
    if not any(rel.endswith(".png") for rel in seen) or (manifest is not None and not manifest.get("files")):
        findings.append(Finding("empty", "./", "the release holds no images; write it with pfd distill"))

    labels = sorted(p.name for p in root.iterdir() if p.is_dir())
    if len(labels) == 1:
        findings.append(Finding("empty", "./", "the release holds one identity: it says who it is about; distill at least 2"))
    if private is not None:
        method = str(manifest.get("method", "")) if manifest is not None else ""
        tokens, plain = _source_tokens(private, f"{_VOCAB} {method}")
        texts = [(rel, rel) for rel in seen] + [(rel + "/", rel) for rel in labels]
        if manifest is not None:
            texts += [(f"{MANIFEST}:{loc}", s) for loc, s in _strings(manifest) if not _HEX64.match(s)]
        for where, text in texts:
            low = text.lower()
            hits = sorted(t for t in tokens if t in low)
            if hits:
                findings.append(Finding("source-name", where, f"contains source name(s) {', '.join(hits[:3])}; remove them"))
        if CARD in seen and (root / CARD).is_file():  # the card's own words are not names; anything else may be

            words = card_vocabulary()
            low = (root / CARD).read_text(encoding="utf-8", errors="replace").lower()
            hits = sorted(t for t in tokens if t not in words and t in low)
            if hits:
                findings.append(Finding("source-name", CARD, f"contains source name(s) {', '.join(hits[:3])}; remove them "
                                                             "and publish again with pfd distill --resume"))
        same = [lab for lab in labels if lab in plain]
        if labels and len(same) > len(labels) / 2:
            findings.append(
                Finding("source-name", "./", f"{len(same)} of {len(labels)} labels equal source identity names; relabel the release")
            )
        _check_private_images(root, images, private, model, findings)

    if state_dir is not None:
        sd = Path(state_dir)
        if not sd.is_dir():
            raise PfdError(f"{sd}: no such state dir; pass the --state-dir that pfd distill wrote")
        try:
            check_separate(root, sd)
        except PfdError as e:
            findings.append(Finding("state-dir-inside", str(sd), str(e)))
        try:
            check_same_run(root, sd, manifest=manifest)
        except PfdError as e:  # another run's state: its label order and modes say nothing about this release
            findings.append(Finding("other-run", str(sd), str(e)))
            return findings
        try:  # the same check every reader of a release with its state runs (issue 54)
            release_sources(root, sd, manifest=manifest)
        except PfdError as e:  # the map does not describe this release: its label order says nothing either
            findings.append(Finding("proxy-map", str(sd / PROXY_MAP), str(e)))
            _check_state_tree(sd, findings)
            return findings
        _check_state_tree(sd, findings)
        _check_label_order(sd, private, findings)
    return findings


def _check_private_images(root: Path, images: list[str], private: FaceSet, model: Any | None,
                          findings: list[Finding]) -> None:
    """Released images that are private photos (:func:`pfd.release.private_copies.find_private_copies`)."""
    released = [(rel, _decode(root / rel)) for rel in images]
    if len({img.shape for _, img in released}) > 1:
        return  # sizes differ: already an image-size finding; compare nothing rather than guess
    for c in find_private_copies(released, private, model=model):
        how = {"exact": "an exact copy", "near-duplicate": f"a near-duplicate (dHash distance {c.score:.0f} of {c.bits} bits "
               f"<= {c.threshold:.0f})", "embedding": f"a near-duplicate (embedding cosine {c.score:.3f} > {c.threshold:.3f}, "
               "calibrated on this release)",
               "transformed": f"an edited copy (rotated, shifted, cropped, turned or inverted: aligned edge correlation "
               f"{c.score:.2f} > {c.threshold:.2f}, calibrated on this release)",
               "pasted": f"a photo pasted or tiled into it (aligned edge correlation of a window {c.score:.2f} > "
               f"{c.threshold:.2f}, calibrated on this release)"}[c.how]  # fmt: skip
        findings.append(Finding("private-image", c.file, f"{how} of private image {c.private}; remove it and distill again"))


def _check_label_order(state_dir: Path, private: FaceSet | None, findings: list[Finding]) -> None:
    """Labels vs source identities through the state dir's proxy -> source map."""
    p = state_dir / PROXY_MAP
    if not p.is_file():
        return
    doc = read_proxy_map(state_dir)  # the map the run recorded (its digest checked)
    try:
        pairs = {(str(r["label"]), int(r["source"])) for r in doc["proxies"]}
    except (KeyError, TypeError, ValueError) as e:
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
