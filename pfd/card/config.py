"""``pfd card``'s configuration: the release and its state dir, the public side, the test people,
the downstream protocol and the evaluation (the ``[card]`` table of a recipe).

The downstream protocol's defaults are the privacy-utility benchmark's target protocol
(``benchmarks/pu/settings.py``, ``TARGET["downstream"]``; docs/benchmarks.md says why each
number): the public model fine-tuned for one epoch over the public images (+ the release) with
SGD lr 0.01, ArcFace s 32 m 0.5, the head started at the class means. The evaluation's are the
benchmark's too: 3,000 genuine + 3,000 impostor pairs, 10 folds, TAR at FAR 1e-2 and 1e-3, 1,000
identity-bootstrap replicates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfd.config.checks import Checker
from pfd.errors import PfdError

__all__ = ["CardConfig", "DownstreamConfig", "CardEvalConfig", "QUICK"]


#: The most downstream seeds a card runs (two fine-tunes each).
MAX_SEEDS = 100

@dataclass
class DownstreamConfig:
    """The downstream model: the public model fine-tuned on the public data, with or without the release.

    Attributes:
        head: Margin head of the fine-tune (``arcface``, ``cosface``, ``adaface``, ``magface``).
        scale: Logit scale s.
        margin: Margin m.
        head_init: ``class_means`` (each class row starts at its images' mean embedding) or ``random``.
        epochs: Passes over the public images (+ the release).
        batch_size: Batch size.
        lr: Peak SGD learning rate.
        warmup_epochs: Linear warm-up in epochs.
        public_images: A fixed seeded sample of the public images (0: all of them).
    """

    head: str = "arcface"
    scale: float = 32.0
    margin: float = 0.5
    head_init: str = "class_means"
    epochs: float = 1.0
    batch_size: int = 64
    lr: float = 0.01
    warmup_epochs: float = 0.1
    public_images: int = 0

    def check(self) -> None:
        c = Checker(self, "card.downstream.", flags=False)
        c.choice("head", ("arcface", "cosface", "adaface", "magface"))
        c.choice("head_init", ("class_means", "random"))
        c.positive("lr")
        c.non_negative("warmup_epochs")
        f = Checker(self, "card.downstream.", flags=True)  # the settings pfd card has a flag for
        f.positive("epochs")
        # The fine-tune counts whole passes; 1.5 failed late, after the card folder existed (issue 34).
        f("epochs", lambda v: float(v).is_integer(), "must be a whole number of passes over the data")
        f.at_least("batch_size", 2)
        f.at_least("public_images", 0)


@dataclass
class CardEvalConfig:
    """How utility is measured on the test people.

    Attributes:
        pairs: Genuine pairs (and as many impostors); all of them when the test set has fewer.
        folds: Folds of the verification accuracy.
        fars: False-accept rates of the TAR figures.
        bootstrap: Identity-bootstrap replicates of the intervals.
        flip: Flip-fused test embeddings.
        seed: Seed of the pairs and the bootstrap.
    """

    pairs: int = 3000
    folds: int = 10
    fars: list[float] = field(default_factory=lambda: [1e-2, 1e-3])
    bootstrap: int = 1000
    flip: bool = False
    seed: int = 0

    def check(self) -> None:
        c = Checker(self, "card.eval.", flags=False)
        f = Checker(self, "card.eval.", flags=True)  # the settings pfd card has a flag for
        f.at_least("pairs", 1)
        f.at_least("bootstrap", 10)
        c.at_least("folds", 2)
        c("fars", lambda v: bool(v) and all(isinstance(x, (int, float)) and 0 < x < 1 for x in v),
          "must list false-accept rates in (0, 1), e.g. [0.01, 0.001]")
        c.at_least("seed", 0)


@dataclass
class CardConfig:
    """``pfd card``: a release's privacy-utility card on the publisher's own faces.

    Attributes:
        release: The release folder.
        state_dir: The publisher's state dir (proxy -> source map, public model).
        private: The private set (empty: the spec recorded in the state dir).
        public_model: The public model the downstream fine-tunes (empty: ``state_dir/public_model.pt``).
        public: Public training data of the target domain's users (dataset specs, repeatable).
        test: Held-out test people of the target domain (a dataset spec): verification pairs.
        out: The card's folder: card.json, card.md, card.html, the attack report and the work.
        seeds: Downstream fine-tunes per side (seeds 0 .. seeds-1), with and without the release.
        resume: Continue a card in ``out`` (finished steps are kept; the settings must match).
        quick: A smoke card: a short fine-tune, few pairs and replicates, no reconstruction.
        holdout: Non-member people for the membership attack (empty: membership is skipped).
        skip_bad: Skip (and list) unreadable images instead of stopping at the first one.
        threads: CPU threads (0: torch's default).
        downstream: The downstream protocol.
        eval: The utility evaluation.
        attack: Settings of ``pfd attack``'s ``[attack]`` table for the privacy half (the audit's
            defaults where it says nothing: the same as ``pfd distill``'s gate and ``pfd attack``).
    """

    release: str = ""
    state_dir: str = ""
    private: str = ""
    public_model: str = ""
    public: list[str] = field(default_factory=list)
    test: str = ""
    out: str = "card"
    seeds: int = 1
    resume: bool = False
    quick: bool = False
    holdout: str = ""
    skip_bad: bool = False
    threads: int = 0
    downstream: DownstreamConfig = field(default_factory=DownstreamConfig)
    eval: CardEvalConfig = field(default_factory=CardEvalConfig)
    attack: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        c = Checker(self, "", flags=True)
        c.paths("release", "state_dir", "private", "public_model", "public", "test", "out", "holdout")
        c.at_least("seeds", 1)
        # Two fine-tunes a seed: 100 seeds is already days of CPU (10**9 were accepted and filled 1.9 GB; issue 34).
        c("seeds", lambda v: v <= MAX_SEEDS, f"must be at most {MAX_SEEDS} (each seed fine-tunes the public model twice)")
        c.at_least("threads", 0)
        c("out", lambda v: bool(v) and not Path(v).expanduser().is_file(), "must name a folder (not an existing file)")
        self.downstream.check()
        self.eval.check()
        for name in ("release", "state_dir"):
            if getattr(self, name) and self.out and _same(getattr(self, name), self.out):
                raise PfdError(f"--out {self.out} is the --{name.replace('_', '-')} folder: the card needs its own folder")


def _same(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


#: ``--quick``: a smoke card in minutes (figures mean little): a short fine-tune, few pairs and
#: replicates, no reconstruction attack.
QUICK: dict[str, Any] = {
    "downstream": {"epochs": 1.0, "public_images": 256},
    "eval": {"pairs": 300, "bootstrap": 100},
    "attack": {"reconstruction": {"enabled": False}},
}

