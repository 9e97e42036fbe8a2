"""The range rules of every stage config: checked before any stage runs.

:func:`validate_config` (called by :func:`pfd.config.build_config` and again by the stages)
applies them; a broken rule is one :class:`~pfd.errors.PfdError` line that names the CLI
flag, the setting and the value, e.g. ``--ipc (rta.ipc) = 0: must be at least 1``.
A method's own rules (its name, what it ignores, a de-linking term's judge) are its record's
(:func:`pfd.distill.methods.check_method`).
"""

from __future__ import annotations

import math
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator

from pfd.config.stages import DEFAULT_LICENSE, AttackConfig, BaselineConfig, DistillConfig, EvalConfig, OGPConfig, ReleaseConfig, RTAConfig, TrainConfig
from pfd.data.shape import MAX_SIDE, image_hw
from pfd.errors import PfdError

__all__ = ["Checker", "check_config", "validate_config", "recipe_keys", "outer_key", "same_model"]

#: CLI flag of a setting where it is not ``--`` + the name with dashes (``pfd distill``'s nested tables).
_FLAGS: dict[str, str | None] = {
    "ogp.max_steps": "--ogp-steps", "ogp.min_steps": "--ogp-min-steps", "ogp.epochs": "--ogp-epochs", "ogp.batch_size": "--ogp-batch-size",
    "ogp.lr": "--ogp-lr", "ogp.head": "--ogp-head", "rta.batch_size": "--rta-batch-size", "rta.lr": "--rta-lr",
    "baseline.cell": "--dp-cell", "baseline.pixels": "--dp-pixels",
    # recipe-only settings (no flag): the message names the recipe key alone
    "ogp.target_below_margin": None, "ogp.step_cap": None,
}  # fmt: skip
#: The recipe table the settings being checked came from, where another command reads them (``card.``).
_OUTER: ContextVar[str | None] = ContextVar("pfd_config_outer_table", default=None)
_CHOICES = {"mixed_precision": ("auto", "no", "bf16", "fp16"), "schedule": ("cosine", "poly")}


#: Linux limits of one path component and of a whole path (bytes); longer names fail with ENAMETOOLONG.
_NAME_MAX, _PATH_MAX = 255, 4096


def _path_ok(v: Any) -> bool:
    """Whether a path (or each of a list of paths) is within :data:`_NAME_MAX` / :data:`_PATH_MAX`."""
    if isinstance(v, (list, tuple)):
        return all(_path_ok(x) for x in v)
    text = os.path.expanduser(str(v))
    return len(text.encode()) < _PATH_MAX and all(len(part.encode()) <= _NAME_MAX for part in text.split(os.sep))


def _size_ok(v: Any) -> bool:
    """An image size whose sides are positive multiples of 16 (the backbones halve them four times),
    at most :data:`~pfd.data.shape.MAX_SIDE`."""
    try:
        return all(16 <= s <= MAX_SIDE and s % 16 == 0 for s in image_hw(v))
    except PfdError:
        return False


class Checker:
    """Collects the rules of one dataclass; raises on the first broken one, naming the flag.

    Args:
        cfg: The dataclass.
        prefix: Its key prefix in messages (``rta.``).
        flags: Name the CLI flag too.
        flag_names: Flag of a field where it is not ``--`` + the name with dashes (a plugin's options).
    """

    def __init__(self, cfg: Any, prefix: str, flags: bool, flag_names: dict[str, str] | None = None) -> None:
        self.cfg, self.prefix, self.flags = cfg, prefix, flags
        self.flag_names = flag_names or {}

    def _name(self, field: str) -> str:
        key = f"{self.prefix}{field}"
        if _OUTER.get() is not None:  # another command's table, whose flags it lacks (issue 34: --csls-k in pfd card)
            return outer_key(key)
        default = self.flag_names.get(field, "--" + field.replace("_", "-"))
        flag = _FLAGS.get(key, default) if self.flags else None
        return f"{flag} ({key})" if flag else key

    def __call__(self, field: str, ok: Any, need: str) -> None:
        value = getattr(self.cfg, field)
        if value is None:
            return
        try:
            good = bool(ok(value))
        except TypeError:
            good = False
        if not good:
            shown = repr(value)
            shown = shown if len(shown) <= 120 else f"{shown[:60]}...{shown[-40:]} ({len(shown)} characters)"
            raise PfdError(f"{self._name(field)} = {shown}: {need}")

    def at_least(self, field: str, low: float) -> None:
        self(field, lambda v: v >= low, f"must be at least {low}")

    def positive(self, field: str) -> None:
        self(field, lambda v: v > 0 and math.isfinite(v), "must be a positive number")

    def non_negative(self, field: str) -> None:
        self(field, lambda v: v >= 0 and math.isfinite(v), "must be 0 or more")

    def choice(self, field: str, options: tuple[str, ...]) -> None:
        self(field, lambda v: v in options, f"must be one of {', '.join(options)}")

    def paths(self, *fields: str) -> None:
        """Path-valued settings must be paths the system can open: no name over 255 bytes, no path over 4095."""
        for field in fields:
            self(field, _path_ok, f"is too long for a path (a name over {_NAME_MAX} bytes or a path over "
                                  f"{_PATH_MAX - 1}); choose a shorter path")

    def not_a_file(self, field: str, what: str) -> None:
        self(field, lambda v: not v or not Path(v).expanduser().is_file(), f"is an existing file; {what} is a folder, choose another path")


def outer_key(key: str) -> str:
    """``key`` as the command being run spells it: under :func:`recipe_keys`' table, else itself."""
    return f"{_OUTER.get() or ''}{key}"


@contextmanager
def recipe_keys(table: str) -> Iterator[None]:
    """Within this block a broken rule names the recipe key under ``table`` and no flag.

    For settings one command reads from another's table: ``pfd card``'s ``[card.attack.hubness]``
    is ``pfd attack``'s ``[attack.hubness]``, whose ``--csls-k`` flag ``pfd card`` does not have.

    Args:
        table: The outer table's prefix, e.g. ``"card."``.
    """
    token = _OUTER.set(table)
    try:
        yield
    finally:
        _OUTER.reset(token)


def _check_train(cfg: TrainConfig, prefix: str = "", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.choice("head_init", ("random", "class_means"))
    c.at_least("seed", 0)  # numpy generators take no negative seed
    c.paths("data", "init", "out")
    c("size", lambda v: v == 0 or _size_ok(v), f"must be a side or HxW, each a positive multiple of 16 up to {MAX_SIDE}")  # 0: set later (the scorecard's release size)
    c.positive("width")
    c.at_least("embedding_dim", 1)
    c.positive("scale")
    c.non_negative("margin")
    c.at_least("epochs", 1)
    c.at_least("max_steps", 1)
    c.at_least("batch_size", 1)
    c.positive("lr")
    c("momentum", lambda v: 0 <= v < 1, "must be in [0, 1)")
    c.non_negative("weight_decay")
    c.non_negative("warmup_epochs")
    c.non_negative("grad_clip")
    c.choice("mixed_precision", _CHOICES["mixed_precision"])
    c.choice("schedule", _CHOICES["schedule"])
    c.at_least("checkpoint_every", 0)
    c.at_least("workers", 0)
    c.at_least("min_images", 0)
    c.at_least("threads", 0)
    c.not_a_file("out", "the training output")


def _check_eval(cfg: EvalConfig, prefix: str = "", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.at_least("seed", 0)
    c.paths("model", "pairs", "data", "out")
    c.at_least("num_pairs", 1)
    c.at_least("folds", 2)
    c.at_least("batch_size", 1)
    c("out", lambda v: not v or not Path(v).expanduser().is_dir(), "is an existing folder; --out names the JSON file to write")


def _check_ogp(cfg: OGPConfig, prefix: str = "ogp.", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.at_least("seed", 0)
    c.positive("scale")
    c.non_negative("margin")
    c("rep_margin", lambda v: -1 < v < 1, "must lie strictly between -1 and 1 (a cosine margin; L_rep is off outside)")
    c.non_negative("lambda_rep")
    c.non_negative("lambda_iso")
    c.at_least("epochs", 1)
    c.at_least("max_steps", 1)
    c.at_least("min_steps", 0)
    c("target_below_margin", lambda v: 0 <= v <= 1, "must be a share in [0, 1]")
    c.at_least("step_cap", 0)
    c.at_least("batch_size", 1)
    c.positive("lr")
    c.non_negative("rotation_lr")
    c("momentum", lambda v: 0 <= v < 1, "must be in [0, 1)")
    c.non_negative("weight_decay")
    c.non_negative("warmup_epochs")
    c.non_negative("grad_clip")
    c.positive("init_scale")
    c.at_least("checkpoint_every", 0)


def _check_rta(cfg: RTAConfig, prefix: str = "rta.", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.at_least("seed", 0)
    c.at_least("kmeans_seed", 0)
    c.at_least("ipc", 1)
    c.at_least("iterations", 1)
    c.at_least("batch_size", 1)
    c.positive("lr")
    c("betas", lambda v: all(0 <= b < 1 for b in v), "must be two numbers in [0, 1)")
    c.non_negative("lambda_rta")
    c.non_negative("lambda_bn")
    c.non_negative("first_bn_multiplier")
    c("crop_scale", lambda v: 0 < v[0] <= v[1] <= 1, "must be [low, high] with 0 < low <= high <= 1")
    c.at_least("shift", 0)
    c.at_least("kmeans_n_init", 1)
    c.non_negative("init_std")
    c.non_negative("lambda_delink")
    c.choice("init", ("noise", "public"))  # pfd.distill.init_pool.INITS
    c("init_data", lambda v: bool(v) or cfg.init != "public",
      "must name a set of public faces with --init public (an identity folder, RecordIO or synthetic:public)")
    # Given without --init public it was silently ignored (issue 34): the user meant a public start.
    c("init_data", lambda v: not v or cfg.init == "public",
      f"is read only with --init public (rta.init is {cfg.init!r}): add --init public, or drop --init-data")
    c.non_negative("lambda_spatial")
    c.non_negative("lambda_tv")
    c.at_least("downsample", 1)
    c.at_least("spatial_grid", 1)
    c.choice("source_ranks", ("uniform", "kmeans"))
    c.non_negative("lambda_insider")
    c.at_least("lighting_clusters", 0)
    c.at_least("lighting_min_identities", 1)
    c.at_least("lighting_grid", 2)
    c.non_negative("lambda_cf")
    c.at_least("cf_frequencies", 1)
    c.non_negative("cf_sampler_lr")


def _check_baseline(cfg: BaselineConfig, prefix: str = "baseline.", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.at_least("seed", 0)
    c.positive("epsilon")
    c.at_least("cell", 0)
    c.at_least("pixels", 0)
    c.non_negative("blur_sigma")


def _check_release(cfg: ReleaseConfig, prefix: str = "release.", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.at_least("label_seed", 0)
    c.at_least("judge_seed", 0)
    check_license(cfg.license, setting=f"{prefix}license" + (" (--license)" if flags else ""))


_LICENSE_RE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")


def check_license(value: Any, *, setting: str = "release.license (--license)") -> str:
    """A licence identifier (``cc-by-4.0``, ``mit``, ``other``): lower-case letters, digits and ``.+-``.

    Args:
        value: The identifier.
        setting: How the message names the setting.

    Returns:
        The identifier.

    Raises:
        PfdError: Anything else (a newline, a space, YAML or Markdown): it goes into the dataset card's YAML.
    """
    if not isinstance(value, str) or not _LICENSE_RE.fullmatch(value):
        raise PfdError(f"{setting} = {value!r}: not a licence identifier (lower-case letters, digits and . + -, e.g. "
                       f"{DEFAULT_LICENSE}, cc-by-4.0, mit, other)")
    return value


def _check_distill(cfg: DistillConfig, prefix: str = "", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.paths("private", "public", "out", "state_dir", "embed_cache")
    c("method", lambda v: isinstance(v, str) and bool(v), "must name a method (pfd distill --help lists them)")
    c("size", _size_ok, f"must be a side or HxW, each a positive multiple of 16 up to {MAX_SIDE}")
    c.at_least("min_images", 0)
    c.choice("mixed_precision", _CHOICES["mixed_precision"])
    c.at_least("workers", 0)
    c.at_least("threads", 0)
    c("out", lambda v: bool(v) and not Path(v).expanduser().is_file(), "must name a folder (not an existing file)")
    c("state_dir", lambda v: bool(v) and not Path(v).expanduser().is_file(), "must name a folder (not an existing file)")
    if cfg.out and cfg.state_dir and Path(cfg.out).expanduser().resolve() == Path(cfg.state_dir).expanduser().resolve():
        raise PfdError(f"--out and --state-dir are the same folder ({cfg.out}); the state must never be published")
    _check_train(cfg.pretrain, "pretrain.", flags=False)
    _check_ogp(cfg.ogp, "ogp.", flags)
    _check_rta(cfg.rta, "rta.", flags)
    _check_release(cfg.release, "release.", flags)
    _check_baseline(cfg.baseline, "baseline.", flags)
    _check_judge(cfg)
    f = int(cfg.rta.downsample)
    if f > 1 and _size_ok(cfg.size) and any(side % f for side in image_hw(cfg.size)):
        sides = "x".join(map(str, image_hw(cfg.size)))
        ok = [d for d in range(2, min(image_hw(cfg.size)) + 1) if all(s % d == 0 for s in image_hw(cfg.size))][:4]
        raise PfdError(f"rta.downsample{' (--downsample)' if flags else ''} = {f} does not divide the image size "
                       f"{sides}: the proxies are optimised at size / downsample per side; use one of "
                       f"{', '.join(map(str, ok))}")


def _check_judge(cfg: DistillConfig) -> None:
    """A judge must be a model that no loss sees (whether a method needs one is its record's rule)."""
    judge = cfg.release.judge
    if judge == "pretrain":
        if cfg.public:
            raise PfdError("--judge pretrain pretrains a second model like the pretrained public one, but --public "
                           f"{cfg.public} is given: pass --judge CKPT, a face model that no loss sees")
        if cfg.release.judge_seed == cfg.pretrain.seed:
            raise PfdError(f"release.judge_seed = {cfg.release.judge_seed} is the public model's seed: the judge would "
                           "be the public model itself; choose another judge_seed")
    elif judge:
        j = Path(judge).expanduser()
        if cfg.public and same_model(j, Path(cfg.public).expanduser()):
            raise PfdError(f"--judge {judge} is the public model (--public {cfg.public}; same file or same weights): "
                           "a judge must be a model no loss sees")


def _weights_digest(path: Path) -> str | None:
    """sha256 of a checkpoint's backbone weights (names and values), or ``None`` when it does not load."""
    import hashlib

    try:
        from pfd.nn.checkpoints import load_backbone

        model = load_backbone(path)
    except Exception:  # noqa: BLE001 - an unreadable checkpoint is reported by the stage that loads it
        return None
    from pfd.embed import hash_state_dict

    h = hashlib.sha256()
    hash_state_dict(h, model.state_dict())
    return h.hexdigest()


def same_model(a: Path, b: Path) -> bool:
    """Two checkpoints are one model when they are one file, equal bytes or equal weights (told by
    content, never by how the path is spelt: a copy under another name is the same model)."""
    if a.resolve() == b.resolve():
        return True
    if not (a.is_file() and b.is_file()):
        return False
    from pfd.io import sha256_file

    if sha256_file(a) == sha256_file(b):
        return True
    da = _weights_digest(a)
    return da is not None and da == _weights_digest(b)


def _check_attack(cfg: AttackConfig, prefix: str = "", flags: bool = True) -> None:
    c = Checker(cfg, prefix, flags)
    c.at_least("seed", 0)
    c.paths("release", "private", "state_dir", "public_model", "report", "attackers")
    c("report", lambda v: not v or not Path(v).expanduser().is_file(), "must name a folder (not an existing file)")
    c.at_least("batch_size", 1)
    c.at_least("public_model_size", 0)
    c.at_least("attacker_size", 0)
    c.at_least("grid_rows", 0)
    c("attacks", lambda v: all(isinstance(t, dict) for t in v.values()), "must hold one table per attack")


_VALIDATORS: dict[type, Any] = {
    TrainConfig: _check_train, EvalConfig: _check_eval, OGPConfig: _check_ogp, RTAConfig: _check_rta,
    BaselineConfig: _check_baseline, ReleaseConfig: _check_release, DistillConfig: _check_distill, AttackConfig: _check_attack,
}  # fmt: skip


def check_config(cfg: Any) -> None:
    """Apply the rules of ``cfg``'s dataclass (none for dataclasses without rules).

    Raises:
        PfdError: Naming the flag, the setting and the value.
    """
    check = _VALIDATORS.get(type(cfg))
    if check is not None:
        check(cfg)
    elif callable(getattr(cfg, "check", None)):  # a plugin's config owns its rules (an attack's)
        cfg.check()


def validate_config(cfg: Any) -> Any:
    """Check every numeric (and choice) setting of a stage config before any work starts.

    :func:`build_config` calls it for the top-level config; the stages call it again for
    configs built in Python. The rules are the ``_check_*`` functions above.

    Args:
        cfg: A config dataclass.

    Returns:
        ``cfg`` (unchanged).

    Raises:
        PfdError: ``"--ipc (rta.ipc) = 0: must be at least 1"``: the flag, the setting, the value.
    """
    check_config(cfg)
    return cfg
