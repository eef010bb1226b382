"""The user's inputs: ``tasks.json``, ``preregistration.yaml``, scenarios, the price table, the lock.

Reads files safely (bounded, regular files, strict parsers), validates them into frozen pydantic models
whose errors name the file and the field, and freezes a preregistration (``skilltrial lock``), with what of the
base commit's tree no trial may see (``basetree``). Also writes the
starting templates (``skilltrial init``). May import :mod:`harness.errors`, :mod:`harness.host` and
:mod:`harness.records`; nothing that runs containers, trials, analysis or reports.
"""
