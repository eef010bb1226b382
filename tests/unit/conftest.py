"""Unit-test fixtures (helpers live in ``studykit``, importable by test modules)."""

from studykit import make_study

__all__ = ["make_study"]
