"""Face data: identity folders, RecordIO, verification pairs, the synthetic set (releases: :mod:`pfd.release`).

Every source is a :class:`pfd.data.faceset.FaceSet`; :func:`pfd.data.sources.open_faces` opens a
dataset spec as one. (The package itself imports nothing: :mod:`pfd.data.shape`, which the configs
use, then loads without torch.)
"""
