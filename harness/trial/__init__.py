"""One trial, top to bottom (:mod:`harness.trial.trial` reads like ``docs/design.md#one-trial-end-to-end``),
and the steps it is made of: the agent under test behind one seam (:mod:`harness.trial.agents`: Claude Code,
the Codex CLI), the workspace, the watchdog, the gateway's
meter, the patch as hostile data, the judge, installed delivery and "did it fire?".

May import :mod:`harness.sandbox`, :mod:`harness.results`, :mod:`harness.study` and the foundation; never
the experiment, analysis or reporting layers.
"""
