"""The release's dataset card: ``release/README.md``, as data sets are published today.

Where people publish and find data sets, a data set is a folder with a README.md whose YAML front
matter says its licence, task, size and tags, and whose text says what the data is, how it was
made, what it may and may not be used for, and how to load it. :func:`dataset_card` writes that
card for a pfd release from **aggregates only**: counts, image size, method, the pfd version, a
digest of the settings, and the verdict of the audit it passed (:meth:`pfd.audit.verdict.Verdict.summary`).
No identity name, path, seed or anything of the state dir reaches it, so nothing a hostile
identity or folder name holds can be injected into the card's YAML or Markdown.

The writer (:func:`pfd.release.writer.write_release`) writes the card after the images and before
the manifest, which lists it with its sha256 (``manifest["card"]``); ``pfd release lint`` accepts
exactly that file at the release's top level, and the audit's integrity check, which is the lint,
agrees.
"""

from __future__ import annotations

from typing import Any, Mapping

from pfd.config.checks import check_license
from pfd.config.stages import DEFAULT_LICENSE
from pfd.release.format import CARD
import hashlib
import json

__all__ = ["CARD", "DEFAULT_LICENSE", "check_license", "dataset_card", "settings_digest", "size_category",
           "card_vocabulary"]

#: Settings left out of the card's settings digest: those that name files and folders (a path may name
#: people) and those of how a run runs, not what it makes (a resumed run publishes the same card).
_PATHS = ("private", "public", "out", "state_dir", "embed_cache", "init_data", "judge", "data",
          "resume", "threads", "workers", "skip_bad")

def size_category(n: int) -> str:
    """The hub's ``size_categories`` bucket of ``n`` images."""
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return name
    return "1M<n<10M" if n < 10_000_000 else "n>10M"


def _num(x: Any, fmt: str) -> str:
    return "n/a" if x is None else format(float(x), fmt)


def dataset_card(*, num_classes: int, num_images: int, image_size: Any, method: str, pfd_version: str,
                 settings_digest: str, license: str = DEFAULT_LICENSE, audit: Mapping[str, Any] | None = None,
                 real_images: bool = False) -> str:
    """The text of ``release/README.md`` (pure; aggregates only).

    Args:
        num_classes: Proxy classes (one per private identity).
        num_images: Proxy images.
        image_size: ``S`` or ``[H, W]``.
        method: The distillation method (``pfd`` publishes; the others are benchmark rows).
        pfd_version: pfd's version.
        settings_digest: sha256 of the run's settings without paths (the recipe as resolved).
        license: A licence identifier (:func:`check_license`).
        audit: The verdict the release passed (:meth:`pfd.audit.verdict.Verdict.summary`), or ``None``.
        real_images: The method releases real private photos, possibly transformed (``raw``, ``blur``,
            ``dp-pix``: benchmark rows): the card says so instead of "synthetic".

    Returns:
        Markdown with YAML front matter.
    """
    check_license(license)
    side = f"{image_size} × {image_size}" if isinstance(image_size, int) else f"{image_size[0]} × {image_size[1]}"
    per = num_images // max(num_classes, 1)
    front = ["---", f"license: {license}", "task_categories:", "- image-classification", "tags:", "- face-recognition",
             "- synthetic", "- privacy", "- dataset-distillation", "- pfd", "size_categories:",
             f"- {size_category(num_images)}", f"pretty_name: pfd proxy faces ({num_classes} classes)", "---", ""]
    a = dict(audit or {})
    if a:
        verdict = "passed" if a.get("publishable") else "**refused** (published with `--allow-linkable`)"
        share, people, mult = a.get("rules_out_share"), a.get("people"), a.get("rules_out_multiple")
        design = (f" By design the audit rules out that any attacker names the source of more than "
                  f"{_num(100 * share if share is not None else None, '.1f')} % of the {people} people "
                  f"({_num(mult, '.1f')}× chance)." if share is not None and people else "")
        audit_text = [
            f"pfd's audit (version {a.get('version')}) {verdict} this release: {a.get('figures')} figures and "
            f"{a.get('checks')} checks at family-wise level {_num(100 * float(a.get('level', 0.01)), 'g')} % (no private "
            "photo in the release, the rotation's margin, and every linkage attack — visual matching, rank-1 "
            "re-identification, their hubness-corrected forms, rank-last, the rank of the source, class-level linking — "
            "by the public model and the publisher's adapted model, and by a judge no loss saw where the run had one). "
            "Largest linkage rate: "
            f"{_num(a.get('largest_rate_over_chance'), '.1f')}× chance." + design]
    else:
        audit_text = ["No audit verdict is recorded with this release."]
    if real_images:
        what = [f"{num_images} face images in {num_classes} classes, {side} pixels, released by pfd {pfd_version} with "
                f"method `{method}`: **real photos of the people of a private set** (possibly blurred or noised), a "
                "benchmark row that pfd's own releases are compared with, not a privacy release. Do not publish it."]
    else:
        what = [f"{num_images} synthetic face images in {num_classes} classes, {side} pixels, made by pfd {pfd_version} "
                f"(method `{method}`) from a private face-recognition training set. Each class stands for one person of "
                "that set, but **no image is a photo of anyone**: the images were optimised from noise or public faces "
                "to train face-recognition models, and the class labels are an arbitrary permutation that says nothing "
                "about who the classes come from."]
    if method == "pfd":
        how = ["Private Face Distillation: a public face-recognition model was fine-tuned on the private set together "
               "with a learned rotation of its embedding space (Orthogonal Geometry Preservation), then the proxies were "
               "distilled against per-person prototypes of the rotated embeddings (Relational Topology Alignment). The "
               "rotation, the adapted model and the map from proxies to people stay with the publisher and are not part "
               "of this release."]
    else:
        how = [f"Method `{method}`, one of pfd's benchmark rows (see pfd's documentation, docs/distill.md). The map "
               "from images to people stays with the publisher and is not part of this release."]
    lines = front + [
        f"# pfd proxy faces: {num_classes} classes × {per} images",
        "",
        "## What this is",
        "",
        *what,
        "",
        "## How it was made",
        "",
        *how,
        f"Settings digest (sha256 of the resolved recipe, without paths): `{settings_digest}`.",
        "",
        "## The privacy audit it passed",
        "",
        *audit_text,
        "",
        "## Uses",
        "",
        "- Intended: training and evaluating face-recognition models, alone or together with public data, and "
        "research on privacy-preserving data release.",
        "- Out of scope: identifying, tracking or profiling anyone; linking the classes back to real people; "
        "presenting the images as photos of real people.",
        "",
        "## Limitations",
        "",
        "- The images are synthetic and may look unnatural; a model trained on them alone is weaker than one "
        "trained on real photos.",
        "- The audit bounds what its attacks and models find; it is not a formal (differential-privacy) guarantee.",
        "- The demographics and capture conditions of the private set carry over to the classes, with its biases.",
        "",
        "## How to load",
        "",
        "```python",
        "from datasets import load_dataset",
        'ds = load_dataset("imagefolder", data_dir="path/to/this/folder", split="train")  # label = class folder',
        "",
        "from torchvision.datasets import ImageFolder",
        'ds = ImageFolder("path/to/this/folder")',
        "```",
        "",
        "## Files",
        "",
        "`<label>/<k>.png` (8-bit RGB, no metadata); `manifest.json` lists every file with its sha256, the counts, the "
        "method and the audit's verdict; `pfd release lint <folder>` checks them.",
        "",
    ]
    return "\n".join(lines)


def card_vocabulary() -> str:
    """Every word the card's template writes (lower case): ``pfd release lint`` searches a card for source
    names outside it."""
    audit = {"version": 0, "level": 0.01, "figures": 0, "checks": 0, "publishable": True, "largest_rate_over_chance": 0.0,
             "rules_out_share": 0.0, "rules_out_multiple": 0.0, "people": 1}
    return " ".join(dataset_card(num_classes=1, num_images=1, image_size=1, method="pfd", pfd_version="0",
                                 settings_digest="0", audit=a).lower() for a in (audit, None))


def settings_digest(settings: Mapping[str, Any]) -> str:
    """sha256 of a run's resolved settings without the ones that name files or folders."""
    def strip(d: Any) -> Any:
        if isinstance(d, Mapping):
            return {k: strip(v) for k, v in sorted(d.items()) if k not in _PATHS}
        return d

    return hashlib.sha256(json.dumps(strip(settings), sort_keys=True, default=str).encode()).hexdigest()
