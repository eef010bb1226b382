"""The controller's own machine: the host paths (read once from the environment, :mod:`.paths`),
hardened host git, whole-file atomic writes (:mod:`.files`), host-wide trial slots and locks, the record
of every work root a killed run may have left trial directories in, and removing agent-written trees
without following links.

Owns every read of the host's environment and temporary paths that must agree between harness processes
of one user. May import only :mod:`harness.errors` (it is the floor every other package stands on).
"""
