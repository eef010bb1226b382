"""Pure statistics and decisions: records in, estimates and verdicts out. No I/O, no Docker, no rendering.

May import only :mod:`harness.records`, :mod:`harness.study` (settings models), :mod:`harness.fmt`,
:mod:`harness.errors` and the pure :mod:`harness.results.attempts`.
"""
