"""Face data: identity folders, RecordIO, verification pairs, the synthetic set (releases: :mod:`pfd.release`)."""

from pfd.data.faceset import ConcatFaces, FaceSet, FaceSubset, TensorFaces

__all__ = ["ConcatFaces", "FaceSet", "FaceSubset", "TensorFaces"]
