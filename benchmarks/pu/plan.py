"""The cost model behind ``--plan``: image passes by stage and the minutes they take.

Part of the privacy-utility benchmark (``benchmarks/privacy_utility.py``; :mod:`pu`).
"""

from __future__ import annotations

from typing import Any


from pu.data import Scenario, SpecResolver
from pu.settings import ROWS, PLAIN_FINETUNE, row_seeds
from pu.yale import moderate_light

#: Assumed throughputs (images/s) of the recipe's network (IResNet-18 w0.5, 64 px, batch 64) on the
#: 2-core development machine with one torch thread, for --plan: training (forward + backward),
#: input-gradient steps (RTA, reconstruction) and embedding. Measured 2026-11-30 with one other
#: job running (load ~2): 38 / 45 / 127; two threads were no faster for training (33 / 41 / 202).
THROUGHPUT = {"train": 38.0, "invert": 45.0, "forward": 127.0}


#: The public model trains alone, on every core (batch 128): 4,951 images x 12 epochs in 856 s.
PUBLIC_TRAIN_RATE = 69.0


def plan_passes(settings: dict[str, Any], *, private_ids: int, private_images: int, test_images: int,
                rows: list[str], public_images: int = 0, extra_test_images: int = 0) -> dict[str, dict[str, float]]:
    """Image passes of one scenario by stage, ``{stage: {kind: passes}}`` (``kind`` in
    :data:`THROUGHPUT`), from the settings and the data sizes: the cost model behind ``--plan``.

    Per seed: the shared plain fine-tune and pfd's OGP (``ogp.epochs`` over the private images
    each), one RTA run per RTA method (``ipc × ids × iterations`` input-gradient passes), one
    downstream training per row but ``base`` (``epochs × (public sample + release)``), the MIA and utility
    embeddings of each model (private + test images, twice with flip), the insider's gallery per
    distilled row; reconstructions on ``recon.seeds`` seeds.
    """
    seeds = settings["seeds"]
    methods = {n: m for n, m, _ in ROWS if n in rows}
    distilled = [n for n, m in methods.items() if m is not None]
    rta_methods = [n for n in distilled if methods[n] in ("sre2l", "rta-only", "pfd")]
    finetunes = int(any(methods[n] in PLAIN_FINETUNE for n in distilled)) + int("pfd" in distilled)
    ds = settings["downstream"]
    release = private_ids * settings["rta"]["ipc"]
    per_run = ds["epochs"] * ((ds["public_images"] or public_images) + release)  # public-ft: a little less
    flip = 2 if settings["eval"]["flip"] else 1
    r = settings["recon"]
    per_unit_eval = flip * (private_images + test_images + extra_test_images)
    units = sum(_seeds_n(n, seeds) for n in rows)
    recon = len(distilled) * min(r["seeds"], seeds) * (r["per_identity"] or settings["rta"]["ipc"]) * private_ids
    return {
        "fine-tune (OGP / plain)": {"train": seeds * finetunes * settings["ogp"]["epochs"] * private_images},
        "RTA": {"invert": seeds * len(rta_methods) * settings["rta"]["ipc"] * private_ids * settings["rta"]["iterations"],
                "forward": seeds * len(distilled) * private_images},
        "downstream": {"train": (units - int("base" in rows)) * per_run},
        "evaluation": {"forward": units * per_unit_eval + seeds * len(distilled) * private_images},
        "reconstruction": {"invert": recon * r["iterations"]},
    }


def _seeds_n(name: str, n: int) -> int:
    return len(row_seeds(name, n))


def minutes(passes: dict[str, float], rates: dict[str, float]) -> float:
    return sum(v / rates[k] for k, v in passes.items()) / 60.0


def print_plan(settings: dict[str, Any], scenarios: list[Scenario], resolver: SpecResolver, rows: list[str], *,
               speed: float = 1.0, jobs: int = 1) -> float:
    """Print the estimated minutes by scenario and stage (:func:`plan_passes`) and the wall time
    with ``jobs`` workers (the public model first, then the units shared out); returns the wall."""
    rates = {k: v * speed for k, v in THROUGHPUT.items()}
    pub = settings["public_model"]["train"]
    n_pub = sum(len(resolver(s)) for s in pub["data"])
    public = pub["epochs"] * n_pub / (PUBLIC_TRAIN_RATE * speed) / 60.0
    total = 0.0
    print(f"assumed images/s: {rates}\npublic model: {pub['epochs']} epochs x {n_pub} images = {public:.0f} min "
          "(0 when cached)")
    for sc in scenarios:
        priv, test = resolver(sc.private), resolver(sc.test)
        extra = len(moderate_light(test)) if sc.light_subsets else 0
        stages = plan_passes(settings, private_ids=priv.num_classes, private_images=len(priv),
                             test_images=len(test), rows=rows, public_images=n_pub, extra_test_images=extra)
        mins = {k: minutes(v, rates) for k, v in stages.items()}
        total += sum(mins.values())
        print(f"{sc.name}: {priv.num_classes} private identities ({len(priv)} images), {len(test)} test images, "
              f"{settings['seeds']} seeds: {sum(mins.values()):.0f} min = " + ", ".join(f"{k} {v:.0f}" for k, v in mins.items()))
    wall = public + total / max(1, jobs)
    print(f"units {total:.0f} min of work on {jobs} worker(s); wall ~{wall:.0f} min with the public model "
          "(target: <= 90 on 2 cores)")
    return wall
