"""Configuration: one dataclass per stage, TOML recipes that load into them, range checks, the writer.

A recipe is a TOML file with one table per stage (``[train]``, ``[distill]``, ``[attack]``, ...).
Values resolve in this order, later winning: dataclass defaults < recipe table < CLI flags.
The resolved configuration is written next to every output (``config.toml``) so that a run can
be reproduced and a checkpoint knows the architecture that built it.

* :mod:`pfd.config.stages`: the stage dataclasses (``TrainConfig`` ... ``AttackConfig``);
* :mod:`pfd.config.recipes`: recipe lookup and loading, ``build_config``, the TOML writer;
* :mod:`pfd.config.checks`: the range rules (``validate_config``) and the options a method ignores.

Example:
    >>> cfg = build_config(TrainConfig, load_recipe("demo").get("train", {}), {"epochs": 2})
    >>> save_config(cfg, "runs/x/config.toml", section="train")
"""

from pfd.config import recipes, stages
from pfd.config.checks import validate_config
from pfd.config.recipes import RECIPES_DIR, build_config, config_to_dict, dump_toml, load_recipe, recipe_path, save_config
from pfd.config.stages import (
    ATTACK_DOWNSTREAM_DEFAULTS,
    AttackConfig,
    BaselineConfig,
    DistillConfig,
    EvalConfig,
    OGPConfig,
    ReleaseConfig,
    RTAConfig,
    TrainConfig,
)

__all__ = [*stages.__all__, *recipes.__all__, "validate_config"]
