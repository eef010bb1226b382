"""Renderers and outcome records, read-only over results: terminal text, Markdown, HTML, JUnit,
decision.json, the CI gate, history, the skills ledger.

May import :mod:`harness.results`, :mod:`harness.analysis`, :mod:`harness.study`, :mod:`harness.fmt` and
the foundation; renderers never import each other (they share :mod:`harness.reporting.model`).
"""
