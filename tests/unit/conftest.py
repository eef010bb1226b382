"""Unit-test fixtures (the data builders themselves live in :mod:`tests.factories`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import StudyFactory


@pytest.fixture
def make_study(tmp_path: Path) -> StudyFactory:
    """Build a study directory; arguments override the prereg text, the tasks or the skill files."""
    return StudyFactory(tmp_path)
