"""pfd's benchmarks, a package run from a source checkout: ``python -m benchmarks.<name>``.

Run by hand, not in CI (the tests run their ``--quick`` smoke modes). :mod:`benchmarks.pu` is the
privacy-utility benchmark (``python -m benchmarks.privacy_utility``); the speed ratios are
``python -m benchmarks.speed``; docs/benchmarks.md describes each.
"""
