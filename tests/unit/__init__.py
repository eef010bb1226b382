"""Unit tests: no Docker engine, no network, no host git state."""
