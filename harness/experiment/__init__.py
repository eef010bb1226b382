"""Many trials of one locked preregistration: planning the run, the loop (scheduling, retries, stops),
run-level resources and their teardown, resume and reuse, preflight, progress, and the experiment types
(A/B, library, calibration, triggers).

May import everything below it (trial, sandbox, results, analysis, reporting, study); only
:mod:`harness.cli` and :mod:`harness.demo` import it.
"""
