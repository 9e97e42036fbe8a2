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


# -- no shims: a module that moved is simply gone (a 0.x package keeps no compatibility paths) -----


@pytest.mark.parametrize("old", ["pfd.attacks.reconstruction", "pfd.attacks.audit", "pfd.data.release",
                                 "pfd.data.release_lint", "pfd.distill.state", "pfd.distill.augment"])
def test_former_module_paths_are_plain_import_errors(old):
    with pytest.raises(ModuleNotFoundError, match="No module named"):
        importlib.import_module(old)


def test_family_packages_hold_no_re_exports():
    for pkg in ("pfd.attacks.linkability", "pfd.attacks.membership", "pfd.attacks.attributes", "pfd.attackers",
                "pfd.attacks.scorecard", "pfd.data"):
        names = {n for n in vars(importlib.import_module(pkg)) if not n.startswith("_")}
        assert names <= set(pfd_submodules(pkg)), (pkg, sorted(names))


def pfd_submodules(pkg: str) -> list[str]:
    """The submodule names a package may hold as attributes once they are imported."""
    import pkgutil

    return [m.name for m in pkgutil.iter_modules(importlib.import_module(pkg).__path__)]
