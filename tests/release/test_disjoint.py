"""Data sets told apart by content (pfd/release/disjoint.py)."""



def test_a_set_is_decoded_once_for_every_comparison_and_its_digest(monkeypatch):
    """Review of issue 34: pfd card decoded its test set once per comparison and again for inputs.json."""
    import pfd.release.disjoint as disjoint
    from pfd.data.faceset import to_memory
    from pfd.data.sources import open_faces

    calls = []
    real = disjoint._pixels
    monkeypatch.setattr(disjoint, "_pixels", lambda faces, i, hw: calls.append(id(faces)) or real(faces, i, hw))
    a = to_memory(open_faces("synthetic:test,ids=3,imgs=2,size=32"))
    b = to_memory(open_faces("synthetic:private,ids=3,imgs=2,size=32"))
    c = to_memory(open_faces("synthetic:public,ids=3,imgs=2,size=32"))
    assert disjoint.shared_photos(a, b) == [] and disjoint.shared_photos(a, c) == []
    first = disjoint.content_digest(a)
    assert calls.count(id(a)) == len(a) and calls.count(id(b)) == len(b)
    assert disjoint.content_digest(to_memory(open_faces("synthetic:test,ids=3,imgs=2,size=32"))) == first  # by content
