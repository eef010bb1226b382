"""The wheel and the sdist `make wheelhouse` built (issue 23 item 2): they pass `twine check`, carry the
LICENSE, the metadata a package index shows, one version, and everything an install needs (the docs pages
`skilltrial docs` shows with what they include, the schemas, the image inputs and the demo).

`python -m build` makes the wheel from the sdist, so a file the sdist lacks is missing from the wheel too
and fails here. No index is reached: the files are read where `make wheelhouse` left them.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from harness import __version__, docs, schemas

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / "wheelhouse"


def _built() -> tuple[Path, Path]:
    wheels, sdists = sorted(WHEELHOUSE.glob("skilltrial-*.whl")), sorted(WHEELHOUSE.glob("skilltrial-*.tar.gz"))
    if not wheels or not sdists:
        pytest.fail("no wheel or sdist in wheelhouse/: run `make wheelhouse` (make test does) before this test")
    return wheels[0], sdists[0]


def test_twine_check_passes_on_the_wheel_and_the_sdist() -> None:
    wheel, sdist = _built()
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_both_carry_the_license_and_one_version() -> None:
    wheel, sdist = _built()
    assert wheel.name == f"skilltrial-{__version__}-py3-none-any.whl", "the version is harness.__version__"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = Parser().parsestr(z.read(f"skilltrial-{__version__}.dist-info/METADATA").decode())
        assert z.read(f"skilltrial-{__version__}.dist-info/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    with tarfile.open(sdist) as t:
        member = t.extractfile(f"skilltrial-{__version__}/LICENSE")
        assert member is not None and member.read() == (ROOT / "LICENSE").read_bytes()
        sdist_names = t.getnames()
    assert meta["Version"] == __version__ and meta["License-Expression"] == "MIT"
    assert "MIT" in (ROOT / "LICENSE").read_text().splitlines()[0]
    urls = meta.get_all("Project-URL") or []
    assert {u.split(",")[0] for u in urls} >= {"Homepage", "Documentation", "Source", "Changelog", "Issues"}
    classifiers = meta.get_all("Classifier") or []
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in classifiers)
    assert meta["Requires-Python"] == ">=3.11"
    assert f"skilltrial-{__version__}/mkdocs.yml" in sdist_names
    assert f"skilltrial-{__version__}/docs/getting-started.md" in sdist_names
    assert any(n.endswith("harness/data/schemas/tasks.schema.json") for n in names)


def test_the_wheel_carries_what_an_install_needs() -> None:
    wheel, _ = _built()
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for topic in docs.TOPICS:
            assert f"harness/assets/docs/{topic.page}" in names, f"skilltrial docs {topic.name}"
            text = z.read(f"harness/assets/docs/{topic.page}").decode()
            for m in docs.DIRECTIVE.finditer(text):  # what a page includes ships too
                if m.group(1) != "schema-reference":
                    assert f"harness/assets/{m.group(2).partition('#')[0]}" in names, (topic.page, m.group(0))
        for s in schemas.SCHEMAS:
            assert z.read(f"harness/data/schemas/{s.filename}").decode() == schemas.text(s.name)
    for part in ("Dockerfile.trial", "images/runtime/Dockerfile", "examples/demo/tasks.json",
                 "examples/library/preregistration.yaml", "examples/triggers/preregistration.yaml"):  # fmt: skip
        assert f"harness/assets/{part}" in names, part
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
