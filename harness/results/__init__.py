"""The experiment directory as data: the append-only results log, content-addressed artifacts, the
experiment's metadata, reductions over attempts, loading a directory back, and merging shards; a model
matrix's top directory (``matrix.json``: :mod:`~harness.results.matrix`).

May import :mod:`harness.records`, :mod:`harness.study`, :mod:`harness.redact` and the foundation; never
the sandbox, trial, experiment or reporting layers.
"""
