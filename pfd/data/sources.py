"""One entry point from a dataset spec (a CLI ``--data`` value) to a :class:`FaceSet`.

Accepted specs:

* ``synthetic:<split>[,key=value...]``: the built-in synthetic set (:mod:`pfd.data.synthetic`);
* a folder of identity folders ``root/<identity>/<image>`` (a release folder is one);
* a RecordIO set: a folder holding ``train.rec`` and ``train.idx``, or the ``.rec`` (or ``.idx``)
  file itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from pfd.data.faces import FaceFolder, drop_small_identities
from pfd.data.faceset import FaceSet
from pfd.data.recordio import RecordIOFaces
from pfd.data.shape import ImageSize, canonical_size
from pfd.errors import PfdError

__all__ = ["open_faces", "DEFAULT_SIZE", "ACCEPTED_SPECS"]

#: Image side used when a spec does not fix one (insightface's aligned crops are 112 px).
DEFAULT_SIZE = 112

ACCEPTED_SPECS = ("an identity folder (root/<identity>/<image>), a RecordIO set (a folder with train.rec and "
                  "train.idx, or the .rec file) or synthetic:<split> (public, private, test)")


def open_faces(
    spec: str | os.PathLike,
    *,
    size: ImageSize | None = None,
    min_images: int = 1,
    skip_bad: bool = False,
) -> FaceSet:
    """Open a dataset spec as a :class:`FaceSet`.

    Args:
        spec: ``synthetic:...``, an identity folder, or a RecordIO ``.rec`` / folder.
        size: Image side ``S`` or ``(H, W)`` (:mod:`pfd.data.shape`); ``None``: the synthetic spec's own size, else
            :data:`DEFAULT_SIZE`.
        min_images: Drop identities with fewer images (the result's ``dropped`` attribute and
            the log say which).
        skip_bad: Identity folders only: skip (count and log) bad files instead of raising.
            RecordIO records are read lazily; a bad one raises when loaded.

    Returns:
        The dataset.

    Raises:
        PfdError: Nothing usable at ``spec`` (the message lists what is accepted).
    """
    text = os.fspath(spec)
    if text == "synthetic" or text.startswith("synthetic:"):
        from pfd.data.synthetic import open_synthetic  # lazy: rendering code is only needed here

        faces = open_synthetic(text, size=size)
        return drop_small_identities(faces, min_images) if min_images > 1 else faces

    path = Path(text).expanduser()
    side = canonical_size(size, what="image size") if size is not None else DEFAULT_SIZE
    if not path.exists():
        raise PfdError(f"{text}: no such file or folder; pass {ACCEPTED_SPECS}")
    if path.is_file():
        if path.suffix.lower() in (".rec", ".idx"):
            faces: FaceSet = RecordIOFaces(path, size=side)
        elif path.suffix.lower() == ".bin" or path.name.lower().endswith("pairs.txt"):
            raise PfdError(f"{path}: is a verification-pairs file, not a training set; pass it as the pairs "
                           "of an evaluation (--pairs) and a dataset here")
        else:
            raise PfdError(f"{path}: not a dataset; pass {ACCEPTED_SPECS}")
    elif (path / "train.rec").is_file():
        faces = RecordIOFaces(path, size=side)
    elif (path / "train.idx").is_file():
        raise PfdError(f"{path}: holds train.idx but not train.rec; copy the .rec next to it")
    else:
        return FaceFolder(path, size=side, min_images=min_images, skip_bad=skip_bad)
    return drop_small_identities(faces, min_images) if min_images > 1 else faces
