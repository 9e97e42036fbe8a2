"""Recipes load into the stage dataclasses; CLI layers override; the saved config round-trips."""

from __future__ import annotations

import pytest

from pfd.config import (
    DistillConfig,
    EvalConfig,
    TrainConfig,
    build_config,
    config_to_dict,
    load_recipe,
    recipe_path,
    save_config,
    validate_config,
)
from pfd.distill.methods import ignored_options
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


# -- validation before any work (issue 12) -------------------------------------------------


@pytest.mark.parametrize(
    "cls, table, flag",
    [
        (DistillConfig, {"rta": {"ipc": 0}}, "--ipc"),
        (DistillConfig, {"rta": {"ipc": -2}}, "--ipc"),
        (DistillConfig, {"rta": {"batch_size": 0}}, "--rta-batch-size"),
        (DistillConfig, {"rta": {"batch_size": -4}}, "--rta-batch-size"),
        (DistillConfig, {"rta": {"iterations": 0}}, "--iterations"),
        (DistillConfig, {"ogp": {"max_steps": -1}}, "--ogp-steps"),
        (DistillConfig, {"ogp": {"rep_margin": 5.0}}, "--rep-margin"),
        (DistillConfig, {"ogp": {"rep_margin": -1.0}}, "--rep-margin"),
        (DistillConfig, {"threads": -3}, "--threads"),
        (DistillConfig, {"min_images": -5}, "--min-images"),
        (DistillConfig, {"baseline": {"epsilon": 0.0}}, "--epsilon"),
        (DistillConfig, {"rta": {"init_data": "public/"}}, "--init-data"),  # issue 34: ignored without --init public
        (DistillConfig, {"rta": {"downsample": 0}}, "--downsample"),
        (TrainConfig, {"batch_size": 0}, "--batch-size"),
        (TrainConfig, {"epochs": 0}, "--epochs"),
        (TrainConfig, {"lr": -0.1}, "--lr"),
        (EvalConfig, {"num_pairs": -5}, "--num-pairs"),
        (EvalConfig, {"folds": 1}, "--folds"),
    ],
)
def test_out_of_range_settings_are_one_line_errors_naming_the_flag(cls, table, flag):
    with pytest.raises(PfdError, match=rf"^{flag} \("):
        build_config(cls, table)


def test_settings_in_range_pass_and_python_built_configs_are_checked_too():
    cfg = build_config(DistillConfig, {"ogp": {"rep_margin": -0.5, "max_steps": 3}, "rta": {"ipc": 1}})
    assert cfg.ogp.rep_margin == -0.5
    bad = DistillConfig()
    bad.rta.iterations = 0
    with pytest.raises(PfdError, match="--iterations"):
        validate_config(bad)


def test_a_downsample_that_does_not_divide_the_image_size_is_refused_with_the_divisors():
    assert build_config(DistillConfig, {"size": 48, "rta": {"downsample": 3}}).rta.downsample == 3
    with pytest.raises(PfdError, match=r"^rta\.downsample \(--downsample\) = 3 does not divide the image size 32x32: .* "
                                       r"use one of 2, 4, 8, 16$"):
        build_config(DistillConfig, {"size": 32, "rta": {"downsample": 3}})


def test_outputs_that_are_existing_files_are_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(PfdError, match="existing file"):
        build_config(TrainConfig, {"out": str(f)})
    with pytest.raises(PfdError, match="not an existing file"):
        build_config(DistillConfig, {"out": str(f)})
    with pytest.raises(PfdError, match="existing folder"):
        build_config(EvalConfig, {"out": str(tmp_path)})
    with pytest.raises(PfdError, match="same folder"):
        build_config(DistillConfig, {"out": str(tmp_path / "a"), "state_dir": str(tmp_path / "a")})


def test_options_a_method_ignores():
    assert ignored_options("pfd", {"epsilon", "ipc"}) == ["--epsilon"]
    assert ignored_options("dp-pix", {"epsilon", "iterations"}) == ["--iterations"]
    assert ignored_options("rta-only", {"rep_margin"}) == ["--rep-margin"]
    assert ignored_options("pfd", {"rep_margin", "iterations"}) == []


# -- hostile recipes (issue 20) -----------------------------------------------------------------


@pytest.mark.parametrize("text, match", [
    ("[distill.rta]\nipc = 2.7\n", r"rta\.ipc: expected a whole number, got 2\.7"),
    ("[distil]\nmethod = 'raw'\n", r"unknown table \[distil\]; did you mean \[distill\]\?"),
    ("seed = 3\n", r"unknown table \[seed\]"),
    ("[distill]\nrta = 5\n", r"DistillConfig\.rta: expected a table, got 5"),
])
def test_hostile_recipes_are_one_line_errors(tmp_path, text, match):
    from pfd.config import DistillConfig, build_config, load_recipe

    path = tmp_path / "r.toml"
    path.write_text(text)
    with pytest.raises(PfdError, match=match):
        build_config(DistillConfig, load_recipe(path).get("distill", {}))


def test_a_recipe_that_is_not_utf8_is_a_one_line_error(tmp_path):
    from pfd.config import load_recipe

    path = tmp_path / "r.toml"
    path.write_bytes(b"\xff\xfe[distill]\n")
    with pytest.raises(PfdError, match="not UTF-8 text"):
        load_recipe(path)


def test_every_shipped_recipe_holds_known_tables_only():
    from pfd.config import RECIPES_DIR, load_recipe

    for path in sorted(RECIPES_DIR.glob("*.toml")):
        assert load_recipe(path)  # no unknown table, every value a table


@pytest.mark.parametrize("value", [99999999999999999999, 1e20, "99999999999999999999"])
def test_integers_past_int64_are_refused_before_any_work(value):
    """Issue 20: --iterations 99999999999999999999 raised OverflowError in RTA, after two stages had run."""
    from pfd.config import DistillConfig, build_config

    with pytest.raises(PfdError, match="too large for a 64-bit integer"):
        build_config(DistillConfig, {"rta": {"iterations": value}})
