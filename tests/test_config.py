"""Recipes load into the stage dataclasses; CLI layers override; the saved config round-trips."""

from __future__ import annotations

import pytest

from pfd.config import (
    DistillConfig,
    TrainConfig,
    build_config,
    config_to_dict,
    load_recipe,
    recipe_path,
    save_config,
)
from pfd.errors import PfdError


def test_layers_override_in_order():
    cfg = build_config(TrainConfig, {"epochs": 3, "lr": 0.5}, {"epochs": 7, "lr": None})
    assert cfg.epochs == 7  # later layer wins
    assert cfg.lr == 0.5  # None means "flag not given"
    assert cfg.momentum == TrainConfig().momentum


def test_types_are_coerced_and_checked():
    cfg = build_config(TrainConfig, {"epochs": "4", "lr": "0.01", "flip": "false", "data": "a"})
    assert cfg.epochs == 4 and cfg.lr == 0.01 and cfg.flip is False and cfg.data == ["a"]
    with pytest.raises(PfdError, match="TrainConfig.epochs"):
        build_config(TrainConfig, {"epochs": "many"})


def test_unknown_key_names_valid_ones():
    with pytest.raises(PfdError, match="unknown setting 'epoch'.*epochs"):
        build_config(TrainConfig, {"epoch": 3})


def test_nested_tables_merge_key_by_key():
    cfg = build_config(DistillConfig, {"rta": {"iterations": 5}}, {"rta": {"lr": 0.1}})
    assert cfg.rta.iterations == 5 and cfg.rta.lr == 0.1
    assert cfg.rta.betas == (0.5, 0.9)


def test_saved_config_is_a_recipe_that_round_trips(tmp_path):
    cfg = build_config(DistillConfig, {"method": "rta-only", "rta": {"crop_scale": [0.3, 1.0]}})
    path = tmp_path / "config.toml"
    save_config(cfg, path, section="distill")
    back = build_config(DistillConfig, load_recipe(path)["distill"])
    assert config_to_dict(back) == config_to_dict(cfg)


def test_missing_recipe_lists_known_ones(tmp_path):
    with pytest.raises(PfdError, match="no such recipe"):
        recipe_path(tmp_path / "nope.toml")


def test_partial_nested_table_keeps_the_fields_own_defaults():
    import dataclasses as dc

    @dc.dataclass
    class Outer:
        inner: TrainConfig = dc.field(default_factory=lambda: TrainConfig(backbone="ir18", epochs=3))

    cfg = build_config(Outer, {"inner": {"epochs": 7}})
    assert cfg.inner.backbone == "ir18" and cfg.inner.epochs == 7
