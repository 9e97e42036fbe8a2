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


# -- pfd.attacks grouped by family: the flat layout's import paths ---------------------------------


@pytest.mark.parametrize("old, new, name", [
    ("pfd.attacks.linkability", "pfd.attacks.linkability.matching", "visual_matching"),
    ("pfd.attacks.linkability", "pfd.attacks.linkability.matching", "rank1_reid"),
    ("pfd.attacks.membership", "pfd.attacks.membership.statistics", "membership_report"),
    ("pfd.attacks.membership", "pfd.attacks.membership.statistics", "identity_statistics"),
    ("pfd.attacks.attributes", "pfd.attacks.attributes.recovery", "attribute_recovery"),
    ("pfd.attacks.models", "pfd.attacks.models.loading", "load_attacker"),
    ("pfd.attacks.scorecard", "pfd.attacks.scorecard.run", "run_scorecard"),
])
def test_family_packages_keep_their_former_names(old, new, name):
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("old", sorted(importlib.import_module("pfd.attacks").MOVED))
def test_moved_modules_name_their_new_place(old):
    new = "pfd.attacks." + importlib.import_module("pfd.attacks").MOVED[old]
    importlib.import_module(new)  # the new place exists
    with pytest.raises(ModuleNotFoundError, match=f"pfd.attacks.{old} moved to {new}"):
        importlib.import_module(f"pfd.attacks.{old}")


def test_an_unknown_attacks_module_is_still_a_plain_import_error():
    with pytest.raises(ModuleNotFoundError, match="No module named 'pfd.attacks.no_such_module'"):
        importlib.import_module("pfd.attacks.no_such_module")
