"""Face data: identity folders, RecordIO, verification pairs, the synthetic set, releases."""

from pfd.data.faceset import FaceSet, FaceSubset, TensorFaces

__all__ = ["FaceSet", "FaceSubset", "TensorFaces"]
