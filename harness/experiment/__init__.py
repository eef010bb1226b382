"""Many trials of one locked preregistration: planning the run, the loop (scheduling, retries, stops),
run-level resources and their teardown, resume and reuse, preflight, progress, and the experiment types
(A/B, library, calibration, triggers; a model matrix runs one A/B per model: :mod:`~harness.experiment.matrix`).

May import everything below it (trial, sandbox, results, analysis, reporting, study); only
:mod:`harness.cli` and :mod:`harness.demo` import it.
"""
