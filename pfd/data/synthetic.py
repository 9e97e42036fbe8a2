"""The built-in synthetic identity set: procedurally rendered faces with known attributes.

Every test and the demo run on this set, so it has to behave like face-recognition data: each
identity has persistent parameters (face shape, skin tone, hair, eye/brow/nose/mouth geometry
and colours, moles and freckles, a low-frequency skin texture, spectacles, facial hair, age) and
every image varies pose, expression, illumination, blur, noise and occlusion. Identity is spread
over many small cues, so a small CNN learns to verify unseen identities while raw pixels do
poorly (see docs/synthetic.md for measurements).

Splits ``public``, ``private`` and ``test`` draw identities from disjoint ranges of global
identity ids, so they never share a person. Domains mirror the PFD paper's scenarios:

* ``clean``: moderate nuisances (the public/source domain),
* ``age``: cross-age; apparent age drifts per image around the identity's age (wrinkles, grey hair),
* ``lowres``: surveillance; shrunk to 16-24 px (at most half the side), JPEG-compressed, enlarged, noisy,
* ``pose``: large pose; strong yaw (profile-like), roll and pitch,
* ``nir``: near-infrared modality; luminance only (R = G = B), bright skin with compressed tone
  differences, dark irises, illuminator fall-off.

Determinism: image ``i`` is a pure function of ``(seed, global identity id, image index, domain,
size)`` and the identity's parameters a pure function of ``(seed, global identity id)``; nothing
depends on access order, process or how many identities were requested (``ids=10`` gives the
first 10 identities of ``ids=20``). Images are rendered as uint8 and returned as ``k / 255``, so
writing them as PNG and reading them back is exact.

Spec strings (``pfd.data.sources.open_faces`` delegates here)::

    synthetic:<split>[,ids=N][,imgs=M][,domain=D][,seed=S][,size=P]
"""

from __future__ import annotations

import csv
import io
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from pfd.data.faceset import FaceSet
from pfd.data.synthetic_params import DOMAINS, IdentityParams, identity_attributes, identity_params, image_rng
from pfd.data.synthetic_render import render_face
from pfd.data.shape import MAX_SIDE, ImageSize, canonical_size, image_hw, pil_size, size_text
from pfd.errors import PfdError
from pfd.io import atomic_open, atomic_write_bytes

__all__ = [
    "SyntheticFaces",
    "open_synthetic",
    "parse_synthetic_spec",
    "write_synthetic",
    "read_attributes",
    "SPLITS",
    "DOMAINS",
    "ATTRIBUTES",
    "DEFAULT_SIZE",
]

#: Split name -> (first global identity id, default identities, default images per identity).
#: Each split owns a block of 10**6 global ids, so splits never share an identity.
SPLITS: dict[str, tuple[int, int, int]] = {
    "public": (0, 200, 24),
    "private": (1_000_000, 40, 20),
    "test": (2_000_000, 40, 16),
}
_SPLIT_BLOCK = 1_000_000
#: Attribute name -> number of classes (ground truth in :attr:`SyntheticFaces.attributes`).
ATTRIBUTES: dict[str, int] = {"tone": 4, "hair": 2, "age": 6}
DEFAULT_SIZE = 112
_MIN_SIZE, _MAX_SIZE = 16, MAX_SIDE
_MAX_IMAGES = 100_000
#: Bytes of rendered images kept per set (oldest out): all of a 5,000-image set at 32 px.
RENDER_CACHE_BYTES = 64 * 2**20
_SPEC_KEYS = ("ids", "imgs", "domain", "seed", "size")
_PREFIX = "synthetic"


class SyntheticFaces(FaceSet):
    """The built-in synthetic identity set (a lazily rendered :class:`~pfd.data.faceset.FaceSet`).

    Sample ``i`` is image ``i % images_per_identity`` of identity ``i // images_per_identity``.

    Args:
        split: ``"public"``, ``"private"`` or ``"test"`` (disjoint identities).
        identities: Number of identities (default per split: public 200, private 40, test 40).
        images_per_identity: Images per identity (default: public 24, private 20, test 16).
        domain: One of ``clean, age, lowres, pose, nir`` (see the module docstring).
        seed: Non-negative integer; another seed gives other people.
        size: Output side in pixels (16..1024), or ``(H, W)`` (each side in that range).
        render_size: Side the faces are drawn at, square (default: ``size``'s height); when it
            differs from ``size``, the drawn
            uint8 image is resized to ``size`` with PIL's bilinear filter (what loading a folder
            written at ``render_size`` would do).

    Raises:
        PfdError: On an unknown split or domain or an out-of-range count, seed or size.
    """

    def __init__(
        self,
        split: str = "private",
        *,
        identities: int | None = None,
        images_per_identity: int | None = None,
        domain: str = "clean",
        seed: int = 0,
        size: ImageSize = DEFAULT_SIZE,
        render_size: ImageSize | None = None,
    ) -> None:
        if split not in SPLITS:
            raise PfdError(f"synthetic: unknown split {split!r}; use one of {', '.join(SPLITS)}")
        if domain not in DOMAINS:
            raise PfdError(f"synthetic:{split}: unknown domain {domain!r}; use one of {', '.join(DOMAINS)}")
        first, n_default, m_default = SPLITS[split]
        n = n_default if identities is None else identities
        m = m_default if images_per_identity is None else images_per_identity
        _check_int(f"synthetic:{split}", "ids", n, 1, _SPLIT_BLOCK)
        _check_int(f"synthetic:{split}", "imgs", m, 1, _MAX_IMAGES)
        _check_int(f"synthetic:{split}", "seed", seed, 0, 2**63 - 1)
        h, w = image_hw(size, what=f"synthetic:{split} size")
        for side in (h, w):
            _check_int(f"synthetic:{split}", "size", side, _MIN_SIZE, _MAX_SIZE)
        # Faces are drawn square (at the height of a non-square output, then stretched to it).
        render_size = h if render_size is None else image_hw(render_size)[0]
        _check_int(f"synthetic:{split}", "size", render_size, _MIN_SIZE, _MAX_SIZE)
        self.split, self.domain, self.seed = split, domain, int(seed)
        self.size, self.render_size = canonical_size(size), int(render_size)
        self.images_per_identity = int(m)
        #: Global identity id of each label (never exposed in names).
        self.gids = np.arange(first, first + n, dtype=np.int64)
        # Names carry the position within the split, not the global id; seed != 0 is marked so
        # that two seeds (two different populations) never share a name.
        tag = f"syn-{split}" if seed == 0 else f"syn-s{seed}-{split}"
        self.identities = [f"{tag}-{k:04d}" for k in range(n)]
        self.labels = np.repeat(np.arange(n, dtype=np.int64), m)
        self._params: OrderedDict[int, IdentityParams] = OrderedDict()
        self._rendered: OrderedDict[int, np.ndarray] = OrderedDict()
        self.attributes = {name: self._attributes_of(k) for k, name in enumerate(self.identities)}

    # -- FaceSet --------------------------------------------------------------------------
    def load(self, index: int) -> torch.Tensor:
        """Image ``index`` as ``(3, H, W)`` float32 in ``[0, 1]``, exactly ``uint8 / 255``."""
        arr = self.render(index)
        return torch.from_numpy(arr).permute(2, 0, 1).float().div_(255.0)

    def name(self, index: int) -> str:
        """``"<identity>/<image index within the identity, 4 digits>.png"``."""
        index = self._check_index(index)
        label, k = divmod(index, self.images_per_identity)
        return f"{self.identities[label]}/{k:04d}.png"

    # -- extras ---------------------------------------------------------------------------
    def render(self, index: int) -> np.ndarray:
        """Image ``index`` as a ``uint8`` array ``(H, W, 3)`` (what :func:`write_synthetic` saves)."""
        index = self._check_index(index)
        hit = self._rendered.get(index)
        if hit is not None:
            return hit.copy()
        label, k = divmod(index, self.images_per_identity)
        gid = int(self.gids[label])
        arr = render_face(self._identity(label), image_rng(self.seed, gid, k, self.domain), self.domain,
                          self.render_size)
        if (self.render_size, self.render_size) != image_hw(self.size):
            arr = np.array(Image.fromarray(arr).resize(pil_size(self.size), Image.Resampling.BILINEAR))
        # An image is a pure function of its index: the audit reads the private set several times
        # (hashes, aligned copies, embeddings), so recent renders are kept (a few MB at 32 px).
        while self._rendered and (len(self._rendered) + 1) * arr.nbytes > RENDER_CACHE_BYTES:
            self._rendered.popitem(last=False)
        if arr.nbytes <= RENDER_CACHE_BYTES:
            self._rendered[index] = arr
        return arr.copy()

    def spec(self) -> str:
        """The spec string that re-opens exactly this set."""
        n, m = self.num_classes, self.images_per_identity
        s = f"{_PREFIX}:{self.split},ids={n},imgs={m},domain={self.domain},seed={self.seed},size={self.render_size}"
        return s

    def describe(self) -> str:
        return (f"SyntheticFaces {self.split} ({self.domain}, seed {self.seed}): {self.num_classes} identities x "
                f"{self.images_per_identity} images, {size_text(self.size)}")

    def __repr__(self) -> str:
        return f"SyntheticFaces({self.spec()!r})"

    def _check_index(self, index: int) -> int:
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range for {len(self)} images")
        return index

    def _identity(self, label: int) -> IdentityParams:
        # Parameters are a pure function of (seed, gid): caching them cannot change pixels.
        ip = self._params.get(label)
        if ip is None:
            ip = identity_params(self.seed, int(self.gids[label]))
            self._params[label] = ip
            if len(self._params) > 4096:
                self._params.popitem(last=False)
        else:
            self._params.move_to_end(label)
        return ip

    def _attributes_of(self, label: int) -> dict[str, int]:
        return identity_attributes(self.seed, int(self.gids[label]))


def _check_int(where: str, key: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise PfdError(f"{where}: {key}={value!r} is invalid; use an integer from {lo} to {hi}")


# --------------------------------------------------------------------------------------------
# spec strings


def parse_synthetic_spec(spec: str) -> dict[str, object]:
    """Parse ``synthetic:<split>[,key=value,...]`` into keyword arguments.

    The split may be omitted (``synthetic`` or ``synthetic:ids=5`` mean the ``private`` split).

    Args:
        spec: The spec string.

    Returns:
        ``{"split": str, ...}`` with any of ``identities``, ``images_per_identity``, ``domain``,
        ``seed``, ``size`` that the spec sets.

    Raises:
        PfdError: On a wrong prefix, unknown split or key, repeated key or bad value; the message
            names the key and lists the valid ones.
    """
    head, sep, rest = spec.strip().partition(":")
    if head.strip().lower() != _PREFIX:
        raise PfdError(f"{spec!r}: not a synthetic spec; write synthetic:<split>[,ids=N,imgs=M,domain=D,seed=S,size=P]")
    parts = [p.strip() for p in rest.split(",")] if sep else []
    out: dict[str, object] = {"split": "private"}
    if parts and "=" not in parts[0]:
        out["split"] = parts.pop(0) or "private"
    if out["split"] not in SPLITS:
        raise PfdError(f"{spec!r}: unknown split {out['split']!r}; use one of {', '.join(SPLITS)}")
    seen: set[str] = set()
    for part in parts:
        if not part:
            continue
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq:
            raise PfdError(f"{spec!r}: {part!r} is not key=value; valid keys: {', '.join(_SPEC_KEYS)}")
        if key not in _SPEC_KEYS:
            raise PfdError(f"{spec!r}: unknown key {key!r}; valid keys: {', '.join(_SPEC_KEYS)}")
        if key in seen:
            raise PfdError(f"{spec!r}: key {key!r} given twice; keep one")
        seen.add(key)
        if key == "domain":
            if value not in DOMAINS:
                raise PfdError(f"{spec!r}: domain={value!r} is unknown; use one of {', '.join(DOMAINS)}")
            out["domain"] = value
            continue
        try:
            number = int(value)
        except ValueError:
            raise PfdError(f"{spec!r}: {key}={value!r} is not an integer") from None
        field = {"ids": "identities", "imgs": "images_per_identity"}.get(key, key)
        out[field] = number
    return out


def open_synthetic(spec: str, *, size: ImageSize | None = None) -> SyntheticFaces:
    """Open the synthetic set described by ``spec``.

    Size rule (as for an image folder): the spec's ``size`` is the size the data is drawn at,
    the ``size`` argument is what the caller needs. With both, faces are drawn at the spec's
    size and resized to the argument; with one, it is used for both; with neither, 112 px.

    Args:
        spec: ``synthetic:<split>[,ids=N][,imgs=M][,domain=D][,seed=S][,size=P]``, e.g.
            ``"synthetic:private,ids=20,imgs=12,domain=lowres"``.
        size: The caller's image size (e.g. the model's input size).

    Returns:
        The :class:`SyntheticFaces`.

    Raises:
        PfdError: On a malformed spec or out-of-range value (see :func:`parse_synthetic_spec`).
    """
    kw = parse_synthetic_spec(spec)
    drawn = kw.pop("size", None)
    out_size = size if size is not None else drawn if drawn is not None else DEFAULT_SIZE
    split = kw.pop("split")
    return SyntheticFaces(split, size=out_size, render_size=drawn if drawn is not None else out_size, **kw)


# --------------------------------------------------------------------------------------------
# writing


def write_synthetic(
    out: str | Path,
    faces: FaceSet,
    *,
    overwrite: bool = False,
    progress: bool | None = None,
) -> Path:
    """Write a face set as an identity folder of PNGs plus ``attributes.csv``.

    Layout: ``out/<identity>/<name>.png`` (the sample's :meth:`~FaceSet.name`) and
    ``out/attributes.csv`` with the header ``identity,<attribute>,...`` (for the synthetic set
    ``identity,tone,hair,age``). Every file is written atomically; pixels are
    ``round(255 * x)``, which for :class:`SyntheticFaces` reproduces the rendered uint8 exactly.

    Args:
        out: Destination folder; created if missing.
        faces: Any FaceSet (usually :class:`SyntheticFaces`).
        overwrite: Allow a non-empty ``out`` (files of the same name are replaced).
        progress: Show a progress bar (default: when stderr is a terminal).

    Returns:
        ``out`` as a Path.

    Raises:
        PfdError: If ``out`` is a file, or a non-empty folder and ``overwrite`` is false.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PfdError(f"{out}: exists and is not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise PfdError(f"{out}: folder is not empty; choose another --out or pass --force to overwrite")
    out.mkdir(parents=True, exist_ok=True)
    render = faces.render if isinstance(faces, SyntheticFaces) else None
    disable = None if progress is None else not progress  # None: only on a terminal
    for i in tqdm(range(len(faces)), desc=f"writing {out}", unit="img", disable=disable):
        if render is not None:
            arr = render(i)
        else:
            arr = np.rint(faces.load(i).clamp(0, 1).permute(1, 2, 0).numpy() * 255).astype(np.uint8)
        name = faces.name(i)
        if not name.lower().endswith(".png"):
            name = str(Path(name).with_suffix(".png"))
        buf = io.BytesIO()
        Image.fromarray(arr, "RGB").save(buf, format="PNG")
        atomic_write_bytes(out / name, buf.getvalue())
    if faces.attributes is not None:
        _write_attributes(out / "attributes.csv", faces.identities, faces.attributes)
    return out


def _write_attributes(path: Path, identities: Sequence[str], attributes: dict[str, dict[str, int]]) -> None:
    keys = [k for k in ATTRIBUTES if any(k in a for a in attributes.values())]
    keys += sorted({k for a in attributes.values() for k in a} - set(keys))
    with atomic_open(path, "w") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["identity", *keys])
        for name in identities:
            a = attributes.get(name, {})
            w.writerow([name, *(a.get(k, "") for k in keys)])


def read_attributes(path: str | Path) -> dict[str, dict[str, int]]:
    """Read an ``attributes.csv`` written by :func:`write_synthetic`.

    Raises:
        PfdError: If the file is missing, has no ``identity`` column or a non-integer value.
    """
    path = Path(path)
    if not path.is_file():
        raise PfdError(f"{path}: attributes file not found; write it with `pfd synth` or pass the right folder")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    result: dict[str, dict[str, int]] = {}
    for line, row in enumerate(rows, start=2):
        name = row.pop("identity", None)
        if not name:
            raise PfdError(f"{path}:{line}: no identity; the header must start with 'identity'")
        try:
            result[name] = {k: int(v) for k, v in row.items() if v not in ("", None)}
        except ValueError:
            raise PfdError(f"{path}:{line}: attribute values must be integers") from None
    return result
