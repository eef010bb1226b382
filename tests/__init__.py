"""The test suite: an importable package, so helpers are imported as ``tests.xxx`` from anywhere."""
