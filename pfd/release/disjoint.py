"""Are two face sets disjoint? Decided by image content, never by how their paths are spelt.

``pfd card --test`` must hold people the release never saw, ``--holdout`` non-members, and the
test people must be unseen by the downstream's public data too. Comparing spec strings missed
``./priv`` against ``priv``, an absolute path, a byte copy of the folder, and a test set with two
private people added (issue 34). Here every image of both sets (opened at one size) is reduced to
the sha256 of its decoded pixels, as ``state/private_set.json`` records the private set: a copy, a
renamed or moved file or a copied folder is the same photo.

A set that must hold *other people* than the private set (``--test``, ``--holdout``) is also
searched for re-encoded, resized, brightened, mirrored, shifted or cropped copies of private photos
(:func:`check_other_people`, the same perceptual search as ``pfd release lint`` runs on a release:
:func:`pfd.release.private_copies.find_private_copies`, whose hash threshold sits at most half as
far as photos of two *different* private people come, so a smooth low-resolution domain does not
turn strangers into copies; an identity counts when most of its photos copy one private person),
and for identity names it shares with the private set (issue 54: the
private set re-encoded as JPEG under the same names read "publishable ... worth −0.2", measured on
the private people).

:func:`shared_identities` says which identities of one set have a photo in the other;
:func:`check_disjoint_sets` turns that into the one-line error; :func:`content_digest` names a set
by what it holds (two flags given the same data).
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from pfd.data.faceset import FaceSet
from pfd.errors import PfdError
from pfd.release.private_copies import find_private_copies
import torch.nn.functional as F

__all__ = ["SharedPhoto", "shared_photos", "shared_identities", "check_disjoint_sets", "check_other_people",
           "content_digest"]


@dataclass(frozen=True)
class SharedPhoto:
    """A photo of set ``a`` that is a photo of set ``b``.

    Attributes:
        a: The image's name in ``a`` (``identity/file``).
        b: The matching image's name in ``b``.
        a_identity: Its identity in ``a``.
        b_identity: The matching image's identity in ``b``.
    """

    a: str
    b: str
    a_identity: str
    b_identity: str


def _pixels(faces: FaceSet, i: int, hw: tuple[int, int]) -> np.ndarray:
    """``(H, W, 3)`` uint8 of image ``i`` at ``hw`` (bilinear where a set was opened at another size)."""
    x = faces.load(i)
    if tuple(x.shape[-2:]) != hw:
        x = F.interpolate(x[None], size=hw, mode="bilinear", align_corners=False, antialias=True)[0].clamp(0, 1)
    return np.clip(np.round(x.permute(1, 2, 0).numpy() * 255.0), 0, 255).astype(np.uint8)


#: Each open set's digests per size: pfd card compares its test set with three others and digests every
#: set for --resume, and a set is decoded once for all of it (the digests live as long as the set).
_SEEN: "weakref.WeakKeyDictionary[FaceSet, dict[tuple[int, int], list[bytes]]]" = weakref.WeakKeyDictionary()


def _digests(faces: FaceSet, hw: tuple[int, int]) -> list[bytes]:
    try:
        done = _SEEN.setdefault(faces, {})
    except TypeError:  # a set that cannot be weakly referenced: digested each time
        done = {}
    if hw not in done or len(done[hw]) != len(faces):
        done[hw] = [hashlib.sha256(_pixels(faces, i, hw).tobytes()).digest() for i in range(len(faces))]
    return done[hw]


def shared_photos(a: FaceSet, b: FaceSet) -> list[SharedPhoto]:
    """Every photo of ``a`` that is a photo of ``b`` (the same decoded pixels, compared at ``a``'s size).

    Args:
        a: One set.
        b: The other (resized to ``a``'s size where it was opened at another).

    Returns:
        One :class:`SharedPhoto` per image of ``a`` that has a match in ``b``, in ``a``'s order.
    """
    if len(a) == 0 or len(b) == 0:
        return []
    hw = a.hw
    where = {d: j for j, d in reversed(list(enumerate(_digests(b, hw))))}
    la, lb = np.asarray(a.labels), np.asarray(b.labels)
    out = []
    for i, d in enumerate(_digests(a, hw)):
        j = where.get(d)
        if j is not None:
            out.append(SharedPhoto(a.name(i), b.name(j), a.identities[int(la[i])], b.identities[int(lb[j])]))
    return out


def shared_identities(a: FaceSet, b: FaceSet) -> dict[str, list[SharedPhoto]]:
    """The identities of ``a`` with a photo in ``b``: ``{identity: [SharedPhoto, ...]}`` in ``a``'s order."""
    out: dict[str, list[SharedPhoto]] = {}
    for s in shared_photos(a, b):
        out.setdefault(s.a_identity, []).append(s)
    return out


def _names(ids: list[str], limit: int = 4) -> str:
    shown = ", ".join(repr(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def check_disjoint_sets(a: FaceSet, b: FaceSet, *, a_flag: str, b_flag: str, fix: str) -> None:
    """Refuse two sets that share a photo, naming the identities and one photo.

    Args:
        a: The set the flag ``a_flag`` names (the one whose identities the message lists).
        b: The set ``b_flag`` names.
        a_flag: E.g. ``"--test test/"``.
        b_flag: E.g. ``"the private set priv/"``.
        fix: What to do, e.g. ``"the test people must be held out of the release: remove them from --test"``.

    Raises:
        PfdError: ``a`` shares a photo with ``b``.
    """
    shared = shared_identities(a, b)
    if not shared:
        return
    first = next(iter(shared.values()))[0]
    n = sum(len(v) for v in shared.values())
    raise PfdError(f"{a_flag} shares {n} photo(s) with {b_flag} (identities {_names(list(shared))}; e.g. {first.a} is "
                   f"{first.b}): {fix}")


def check_other_people(a: FaceSet, private: FaceSet, *, a_flag: str, b_flag: str, fix: str) -> None:
    """Refuse a set that should hold other people than the private set but shares names or copies with it.

    Args:
        a: The set (``--test``, ``--holdout``).
        private: The private set.
        a_flag: E.g. ``"--test test/"``.
        b_flag: E.g. ``"the private set priv/"``.
        fix: What to do.

    Raises:
        PfdError: ``a`` has an identity name of the private set, or an identity most of whose photos
            (at least 2) are perceptual copies of photos of one private identity.
    """
    named = [i for i in a.identities if i in set(private.identities)]
    if named:
        raise PfdError(f"{a_flag} has {len(named)} identity name(s) of {b_flag} ({_names(named)}): the same people under "
                       f"the same names; {fix} (if they are other people, rename their folders)")
    images = [(a.name(i), _pixels(a, i, a.hw)) for i in range(len(a))]
    copies = find_private_copies(images, private, aligned=False)  # it resizes each private photo itself
    # A person, not a photo: an identity is a private person when most of its photos copy photos of one
    # private identity. In a smooth low-resolution domain a stranger's photo can sit at the hash threshold
    # of a private photo (the demo's 2,560 test photos at 32 px: one, at 7 of 7 bits); a re-encoded
    # person has nearly every photo there.
    owner = {n: private.identities[int(private.labels[i])] for i, n in enumerate(private.names)}
    labels = np.asarray(a.labels)
    per_id = np.bincount(labels, minlength=len(a.identities))
    hits: dict[tuple[int, str], list[Any]] = {}
    index = {a.name(i): i for i in range(len(a))}
    for c in copies:
        hits.setdefault((int(labels[index[c.file]]), owner.get(c.private, c.private)), []).append(c)
    people = {k: v for k, v in hits.items() if len(v) >= 2 and 2 * len(v) >= per_id[k[0]]}
    if people:
        (ident, who), found = next(iter(people.items()))
        raise PfdError(f"{a_flag} holds {len(people)} of the private people (photos re-encoded or edited): "
                       f"{len(found)} of {per_id[ident]} photos of {a.identities[ident]!r} copy photos of {who!r} "
                       f"(e.g. {found[0].file} is {found[0].how} of {found[0].private}): {fix}")


def content_digest(faces: FaceSet) -> str:
    """A digest of a set's pixels (sorted, at its size): equal for the same images however named or placed."""
    digests = sorted(_digests(faces, faces.hw))
    return hashlib.sha256(b"".join(digests)).hexdigest()
