"""The cost model behind ``--plan``: image passes by stage and the minutes they take.

Part of the privacy-utility benchmark (``benchmarks/privacy_utility.py``; :mod:`pu`).
"""

from __future__ import annotations

from typing import Any


from pfd.distill.methods import get_method
from benchmarks.pu.data import Scenario, SpecResolver
from benchmarks.pu.settings import ROWS, PLAIN_FINETUNE, row_seeds, row_view
from benchmarks.pu.yale import moderate_light

#: Assumed throughputs (images/s) of the recipe's network (IResNet-18 w0.5, 64 px, batch 64) on the
#: 2-core development machine with one torch thread, for --plan: training (forward + backward),
#: input-gradient steps (RTA, reconstruction) and embedding. Measured 2026-11-30 with one other
#: job running (load ~2): 38 / 45 / 127; two threads were no faster for training (33 / 41 / 202).
THROUGHPUT = {"train": 38.0, "invert": 45.0, "forward": 127.0}

#: The same for the target protocol's MobileFaceNet at 112 x 96, per one-thread worker of two:
#: half of what the pilot measured with two threads alone (pfd distill of 1,589 private images:
#: OGP 24,576 training images in 426 s, RTA 43,200 input-gradient steps in 540 s).
#: RTA's rate halved since issue 27: an own-data unit (30 private people, K = 10) took twice the
#: plan on an idle machine and 2.5-3.2x on a loaded one (RTA dominates a pfd unit); the pilot's rate
#: was measured with the run alone on both cores. On a busy machine pass --speed 0.5 or lower.
THROUGHPUT_TARGET = {"train": 29.0, "invert": 20.0, "forward": 90.0}

#: OGP's margin extension (:mod:`pfd.distill.ogp_trainer`) runs past ``ogp.epochs`` until 95 % of
#: the images are below the margin: 384 steps instead of 50 on the pilot's private set (x 7.7).
#: The trained protocol's 64 px model met the margin within its 2 epochs (x 1).
OGP_EXTENSION = {"target": 7.7, "trained": 1.0}


#: The public model trains alone, on every core (batch 128): 4,951 images x 12 epochs in 856 s.
PUBLIC_TRAIN_RATE = 69.0
#: The target protocol's judge (IResNet-18 w0.25 at 112 x 96, batch 64, every core): 10 epochs over
#: 2,551 public images in 456 s on an idle 2-core AMD EPYC (2026-12-03, issue 35: 56 images/s); about
#: 35 min on a busy machine (12 images/s), where --speed 0.25 says so.
JUDGE_TRAIN_RATE = 56.0


def rates(settings: dict[str, Any]) -> dict[str, float]:
    """The assumed throughputs of the protocol of ``settings``."""
    return THROUGHPUT_TARGET if settings.get("protocol") == "target" else THROUGHPUT


def rta_passes(rta: dict[str, Any]) -> int:
    """Input-gradient passes of one RTA run per private identity: ``ipc × iterations``, twice with the
    de-linking term (one more model's forward and backward through the proxies each iteration)."""
    return rta["ipc"] * rta["iterations"] * (2 if rta.get("lambda_delink", 0.0) > 0 else 1)


def plan_passes(settings: dict[str, Any], *, private_ids: int, private_images: int, test_images: int,
                rows: list[str], public_images: int = 0, extra_test_images: int = 0) -> dict[str, dict[str, float]]:
    """Image passes of one scenario by stage, ``{stage: {kind: passes}}`` (``kind`` in
    :data:`THROUGHPUT`), from the settings and the data sizes: the cost model behind ``--plan``.

    Per seed of each row (:func:`benchmarks.pu.settings.row_seeds`): the shared plain fine-tune (``ogp.epochs``
    over the private images, once per seed any plain row runs) and pfd's OGP (the same times
    :data:`OGP_EXTENSION`), one RTA run per distilled method (``ipc × ids × iterations`` input-gradient
    passes), one downstream training per row but ``base`` (``epochs × (public images + release)``),
    the MIA and utility embeddings of each model (private + test images, twice with flip), the
    insider's gallery per distilled row; reconstructions on ``recon.seeds`` seeds.
    """
    n = {name: len(row_seeds(name, settings)) for name in rows}
    methods = {name: m for name, m, _ in ROWS if name in rows}
    distilled = [name for name, m in methods.items() if m is not None]
    rta_rows = [name for name in distilled if get_method(methods[name]).distilled]  # optimised proxies, not real images
    plain_seeds = max([n[name] for name in distilled if methods[name] in PLAIN_FINETUNE], default=0)
    ogp = settings["ogp"]["epochs"] * private_images
    extension = OGP_EXTENSION["target" if settings.get("protocol") == "target" else "trained"]
    ds, rta, r = settings["downstream"], settings["rta"], settings["recon"]
    release = private_ids * rta["ipc"]
    per_run = ds["epochs"] * ((ds["public_images"] or public_images) + release)  # public-ft: a little less
    flip = 2 if settings["eval"]["flip"] else 1
    per_unit_eval = flip * (private_images + test_images + extra_test_images)
    return {
        "fine-tune (OGP / plain)": {"train": plain_seeds * ogp + n.get("pfd", 0) * ogp * extension},
        "RTA": {"invert": sum(n[x] * rta_passes(row_view(settings, x)["rta"]) for x in rta_rows) * private_ids,
                "forward": sum(n[x] for x in distilled) * private_images},
        "downstream": {"train": sum(n[x] for x in rows if x != "base") * per_run},
        "evaluation": {"forward": sum(n.values()) * per_unit_eval + sum(n[x] for x in distilled) * private_images},
        "reconstruction": {"invert": sum(min(r["seeds"], n[x]) for x in distilled)
                           * (r["per_identity"] or rta["ipc"]) * private_ids * r["iterations"]},
    }


def minutes(passes: dict[str, float], rates: dict[str, float]) -> float:
    return sum(v / rates[k] for k, v in passes.items()) / 60.0


def model_minutes(model: dict[str, Any], resolver: SpecResolver, rate: float) -> tuple[float, int]:
    """Minutes to train one of the run's own models (``{"train": {...}}``) at ``rate`` images/s, and its images."""
    n = sum(len(resolver(s)) for s in model["train"]["data"])
    return model["train"]["epochs"] * n / rate / 60.0, n


def print_plan(settings: dict[str, Any], scenarios: list[Scenario], resolver: SpecResolver, rows: list[str], *,
               speed: float = 1.0, jobs: int = 1, budget_min: float = 90.0,
               cached: dict[str, bool] | None = None) -> float:
    """Print the estimated minutes by scenario and stage (:func:`plan_passes`) and the wall time
    with ``jobs`` workers (the models the run trains first, then the units shared out); returns the wall.

    Args:
        cached: Which of the run's models (``public``, ``judge``) are trained already (counted as 0).
    """
    r = {k: v * speed for k, v in rates(settings).items()}
    cached = cached or {}
    print(f"assumed images/s per worker: {r}")
    models = 0.0
    for name, rate in (("public", PUBLIC_TRAIN_RATE), ("judge", JUDGE_TRAIN_RATE)):
        m = settings.get(f"{name}_model")
        if not m:
            continue
        if "train" not in m:
            print(f"{name} model: {m['checkpoint']} (pretrained, not trained here)")
            continue
        mins, n = model_minutes(m, resolver, rate * speed)
        done = cached.get(name, False)
        models += 0.0 if done else mins
        print(f"{name} model: {m['train']['epochs']} epochs x {n} images = {mins:.0f} min"
              + (" (trained already: 0)" if done else ""))
    total = 0.0
    for sc in scenarios:
        priv, test = resolver(sc.private), resolver(sc.test)
        extra = len(moderate_light(test)) if sc.light_subsets else 0
        n_pub = sum(len(resolver(s)) for s in sc.public)
        stages = plan_passes(settings, private_ids=priv.num_classes, private_images=len(priv),
                             test_images=len(test), rows=rows, public_images=n_pub, extra_test_images=extra)
        mins = {k: minutes(v, r) for k, v in stages.items()}
        total += sum(mins.values())
        seeds = ", ".join(f"{x} {len(row_seeds(x, settings))}" for x in rows)
        print(f"{sc.name}: {priv.num_classes} private identities ({len(priv)} images), {len(test)} test images, "
              f"seeds ({seeds}): {sum(mins.values()):.0f} min = " + ", ".join(f"{k} {v:.0f}" for k, v in mins.items()))
    wall = models + total / max(1, jobs)
    print(f"units {total:.0f} min of work on {jobs} worker(s); wall ~{wall:.0f} min with the models it trains "
          f"(target: <= {budget_min:.0f} on 2 cores)")
    return wall
