"""``pfd card``: the publisher's privacy-utility card of a release, on their own faces.

* :mod:`pfd.card.config`: :class:`~pfd.card.config.CardConfig` (the ``[card]`` table) and its parts;
* :mod:`pfd.card.stats`: identity-bootstrap intervals of utility and membership differences;
* :mod:`pfd.card.downstream`: the downstream fine-tunes with and without the release, and the gain;
* :mod:`pfd.card.inputs`: every input, opened and cross-checked once before any work, then passed down;
* :mod:`pfd.card.folder`: the card's folder, claimed, begun or resumed with the same settings and inputs;
* :mod:`pfd.card.build`: :func:`~pfd.card.build.make_card`, one resumable run (every registered
  attack through the audit, then the utility);
* :mod:`pfd.card.render`: card.json, card.md and the self-contained card.html.

The privacy-utility benchmark (``python -m benchmarks.privacy_utility``) runs its units through
the same functions.
"""
