"""The release and the private state dir that must never travel with it.

* :mod:`pfd.release.format`: what a release holds (layout, PNG bytes, labels, manifest schema);
* :mod:`pfd.release.writer`: writing one (atomically, the manifest last) and the proxy -> source map;
* :mod:`pfd.release.reader`: reading one back as a face set;
* :mod:`pfd.release.lint`: everything a release must not leak, checked;
* :mod:`pfd.release.private_copies`, :mod:`pfd.release.aligned_copies`, :mod:`pfd.release.phash`:
  private photos inside a release, exact, perceptual, transformed, pasted or by embedding;
* :mod:`pfd.release.state_dir`: every rule of the state dir (layout, marker, modes, lock, separation).
"""
