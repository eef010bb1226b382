"""Ship the image inputs, the demo and the docs inside the package, so an installed ``skilltrial`` works anywhere.

The repository keeps ``Dockerfile.trial``, ``images/`` and ``examples/`` where people look for
them; building a wheel (``pip install``, ``pipx install git+URL``, ``python -m build``) copies
them byte for byte into ``harness/assets/``, which :func:`harness.sandbox.images.assets_root` prefers.
Same bytes, same content-hash image tags as a checkout. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
ASSETS = ("Dockerfile.trial", "images", "examples/demo", "examples/skills", "examples/library", "examples/triggers",
          "examples/github-actions", "docs", "README.md", "CHANGELOG.md")
"""Every part of ``skilltrial demo``: the A/B demos, the library demo and the trigger demo (``prepare_demo``
skips a part whose folder is missing, so a wheel without one ran a shorter demo without a word); and the
pages ``skilltrial docs`` shows (docs/, with the README and CI recipes they include)."""


class BuildWithAssets(build_py):
    def run(self) -> None:
        super().run()
        dest = Path(self.build_lib) / "harness" / "assets"
        for rel in ASSETS:
            src = ROOT / rel
            if src.is_dir():
                shutil.copytree(src, dest / rel, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)


setup(cmdclass={"build_py": BuildWithAssets})
