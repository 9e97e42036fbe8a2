"""The methods of ``pfd distill``, one registered record each: the paper's ablation rows and the baselines.

One code path gives every row of the paper's ablation (Table 3), the raw-data reference and the
classic obfuscation baselines; a :class:`Method` record says what a method does at each stage,
and the pipeline, the CLI (``--method``'s choices and the options it ignores) and the config checks
read the record instead of branching on the name:

=============  ==========================================  =================================
method         fine-tuning (stage "adapt")                 proxies (stage "rta")
=============  ==========================================  =================================
``pfd``        OGP, eq. 1-5: 2N-class head, M ∈ SO(D),      RTA, eq. 6-10: L_cls on class
               L_rep, L_iso                                y + N, L_RTA vs P on E Mᵀ, L_bn
``rta-only``   same schedule, N-class head, M = I           L_cls on y, L_RTA vs P on E, L_bn
``sre2l``      same as rta-only                             L_cls on y and L_bn only (SRe2L)
``raw``        same as rta-only (the insider's model)       K real private images per identity
``dp-pix``     same as rta-only                             raw's images, DP-pixelised (Fan 2018)
``blur``       same as rta-only                             raw's images, Gaussian-blurred
``ncfm``       same as rta-only                             L_cls on y and characteristic-function
                                                            matching to the class's private
                                                            features (NCFM, Wang 2025), no L_bn
=============  ==========================================  =================================

A new method is one :func:`register_method` call; ``tests/distill/test_methods.py`` runs over
every registered one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pfd.errors import PfdError

if TYPE_CHECKING:  # the records are read by the CLI at start-up: torch is imported only when a method runs
    import torch

__all__ = ["Method", "METHODS", "register_method", "get_method", "method_names", "ignored_options", "check_method"]

#: ``pfd distill`` options of the obfuscation baselines.
_BASELINE_OPTIONS = ("epsilon", "dp_cell", "dp_pixels", "blur_sigma")
#: Options of OGP's rotation.
_ROTATION_OPTIONS = ("rep_margin", "lambda_rep", "lambda_iso")
#: Options of RTA's optimisation (a method that releases real images runs none of it).
_RTA_OPTIONS = ("iterations", "rta_lr", "lambda_rta", "lambda_bn", "lambda_delink", "init", "init_data", "lambda_spatial",
                "lighting_clusters", "lambda_tv", "downsample")
#: Options of characteristic-function matching (:mod:`pfd.distill.cf_match`).
_CF_OPTIONS = ("lambda_cf", "cf_frequencies")


@dataclass(frozen=True)
class Method:
    """What one method does at each stage.

    Attributes:
        name: The ``--method`` value.
        help: One line for ``--help``.
        rotated: OGP's rotation (eq. 1-5): a 2N-class head, M ∈ SO(D), proxies on the internal
            class y + N (eq. 7); otherwise an N-class head and M = I.
        rta: L_RTA against the K-means prototypes (eq. 9) in the proxies' loss.
        real_images: It releases (transformed) real private images, K per identity (:func:`pfd.distill.prototypes.raw_selection`),
            instead of distilled proxies.
        cf: The proxies' features match the private features of their class through characteristic
            functions with a min-max frequency sampler (:mod:`pfd.distill.cf_match`, NCFM).
        bn: L_bn (eq. 6) in the proxies' loss (NCFM has none).
        decouples: It decouples the proxies from their sources by design (the method to publish
            with); the others are ablation or baseline rows that link.
        settings: A baseline's resolved parameters ``(BaselineConfig, size) -> dict`` (``None``: none).
        transform: A baseline's image transform ``(images (B, 3, H, W), parameters, generator) ->
            images`` applied to the selected real images (``None``: released as they are).
        options: The baseline options (``pfd distill`` parameter names) it uses.
        extra_ignored: Options it ignores beyond what the flags above imply.
    """

    name: str
    help: str
    rotated: bool = False
    rta: bool = False
    real_images: bool = False
    cf: bool = False
    bn: bool = True
    decouples: bool = False
    settings: Callable[[Any, Any], dict[str, float]] | None = None
    transform: "Callable[[torch.Tensor, dict[str, float], torch.Generator], torch.Tensor] | None" = None
    options: tuple[str, ...] = ()
    extra_ignored: tuple[str, ...] = ()

    @property
    def distilled(self) -> bool:
        """Whether its proxies are optimised by RTA's loop (noise or public faces -> proxies)."""
        return not self.real_images

    @property
    def ignores(self) -> tuple[str, ...]:
        """The ``pfd distill`` options (parameter names) this method does not use."""
        out = [o for o in _BASELINE_OPTIONS if o not in self.options]
        if not self.rotated:
            out += _ROTATION_OPTIONS
        if self.real_images:
            out += _RTA_OPTIONS
        else:
            if not self.rta:
                out.append("lambda_rta")
            if not self.bn:
                out.append("lambda_bn")
        if not self.cf:
            out += _CF_OPTIONS
        return tuple(out) + self.extra_ignored

    def baseline(self, cfg: Any, size: Any) -> dict[str, float] | None:
        """The resolved baseline parameters (``None`` for a method that is not a baseline).

        Raises:
            PfdError: A parameter out of range, naming the flag to fix.
        """
        return self.settings(cfg, size) if self.settings is not None else None


#: Every registered method, in ``--method`` order.
METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add ``method`` to :data:`METHODS` (its name must be new)."""
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is already registered")
    METHODS[method.name] = method
    return method


def method_names() -> tuple[str, ...]:
    """The registered method names (``--method``'s choices)."""
    return tuple(METHODS)


def get_method(name: str) -> Method:
    """The record of method ``name``.

    Raises:
        PfdError: An unknown name, listing the registered ones.
    """
    try:
        return METHODS[name]
    except KeyError:
        raise PfdError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None


def ignored_options(method: str, given: set[str] | frozenset[str]) -> list[str]:
    """The ``pfd distill`` options in ``given`` (parameter names) that ``method`` ignores, as flags."""
    return ["--" + k.replace("_", "-") for k in get_method(method).ignores if k in given]


def check_method(cfg: Any) -> Method:
    """The method's own rules on a :class:`~pfd.config.DistillConfig`, before any work.

    Returns:
        The method's record.

    Raises:
        PfdError: An unknown method; a de-linking term without a judge on a distilled method (the
            public model's gate checks would then measure the loss's own target).
    """
    method = get_method(cfg.method)
    if method.distilled and cfg.rta.lambda_delink > 0 and not cfg.release.judge:
        raise PfdError(
            f"--lambda-delink {cfg.rta.lambda_delink:g} trains the proxies against the public model, whose gate checks "
            "then measure the loss's own target: pass --judge CKPT (a face model no loss sees, at the release's size), "
            "--judge pretrain (with a pretrained public model), or --lambda-delink 0")
    return method


def _baseline(name: str) -> Callable[..., Any]:
    """A function of :mod:`pfd.distill.baselines`, imported when first called (it needs torch)."""

    def call(*args: Any) -> Any:
        from pfd.distill import baselines

        return getattr(baselines, name)(*args)

    call.__name__ = call.__qualname__ = name
    return call


register_method(Method("pfd", "OGP + RTA: the method to publish with", rotated=True, rta=True, decouples=True))
register_method(Method("rta-only", "ablation: RTA without the rotation", rta=True))
register_method(Method("sre2l", "ablation: BN statistics and CE only (SRe2L)"))
register_method(Method("ncfm", "baseline: characteristic-function matching (NCFM, Wang 2025)", cf=True, bn=False))
register_method(Method("raw", "reference: K real private images per identity", real_images=True))
register_method(Method("dp-pix", "baseline: DP pixelisation of raw's images (Fan 2018)", real_images=True,
                       settings=_baseline("dp_pix_settings"), transform=_baseline("dp_pix_transform"),
                       options=("epsilon", "dp_cell", "dp_pixels")))
register_method(Method("blur", "baseline: Gaussian blur of raw's images", real_images=True,
                       settings=_baseline("blur_settings"), transform=_baseline("blur_transform"), options=("blur_sigma",)))
