"""Every name pfd exports resolves to a real object (the lazy export table has no stale entry)."""

from __future__ import annotations

import importlib

import pytest

import pfd


@pytest.mark.parametrize("name", sorted(pfd._EXPORTS))
def test_export_resolves(name):
    obj = getattr(pfd, name)
    assert getattr(importlib.import_module(pfd._EXPORTS[name]), name) is obj


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError):
        pfd.no_such_name  # noqa: B018
