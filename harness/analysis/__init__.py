"""Pure statistics and decisions: records in, estimates and verdicts out. No I/O, no Docker, no rendering.

From records to a verdict, one concept per module, each usable on its own:
:mod:`~harness.analysis.observations` (records -> one observation per trial, and the run's context),
:mod:`~harness.analysis.estimates` (every figure a report shows: ``analyze``),
:mod:`~harness.analysis.rules` (the point and interval rules),
:mod:`~harness.analysis.reasons` (reason codes and reasons),
:mod:`~harness.analysis.decide` (the gates in front of the rule: ``decide``),
:mod:`~harness.analysis.curtail` (the exact early-stopping check), with :mod:`~harness.analysis.stats`
beneath them all; the skill-library and skill-use analyses sit beside them, and
:mod:`~harness.analysis.runnotes` (what the reports note beside the decision: API failures, reused results);
:mod:`~harness.analysis.matrix` (a model matrix's rule over the per-model verdicts).

May import only :mod:`harness.records`, :mod:`harness.study` (settings models), :mod:`harness.fmt`,
:mod:`harness.errors` and the pure :mod:`harness.results.attempts`.
"""
