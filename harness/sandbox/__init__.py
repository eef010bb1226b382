"""Everything that talks to the container engine: the runtime interface, the Docker engine (the only
``import docker`` in the project), one container spec per role (with the CLI containers' environment), a
container's two deadlines, labels and reaping, uids, images, doctor, and a pool of engines (``pool``; ``ssh://``
engines through ``sshtunnel``).

May import :mod:`harness.errors`, :mod:`harness.retry`, :mod:`harness.host`, :mod:`harness.study` and
:mod:`harness.records`; never the trial, experiment, analysis or reporting layers above it.
"""
