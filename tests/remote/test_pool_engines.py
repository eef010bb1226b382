"""Three docker-in-docker engines, each reached its own way (issue 29's test bed): plain TCP, TCP with TLS
and a test CA, ssh with an sshd inside and a test key (:func:`tests.remote.dind.dind_engines`, the
``dind_pool`` fixture). Each runs a hardened container of the harness's images, holds the machine's image ids
(copied in by the product's own ``sync_images`` at set-up), takes a copy over its own transport, refuses to
be mixed in when it holds a tag as another image, and ``skilltrial doctor`` checks all of them.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import main
from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageMismatch, ImageSet, sync_images
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import ContainerSpec, Limits
from tests.remote.dind import DindEngine

pytestmark = [
    pytest.mark.docker,
    pytest.mark.local_engine("makes its own docker-in-docker engines on the machine's engine"),
]


@pytest.fixture(scope="module")
def pool(dind_pool: list[DindEngine]) -> Iterator[dict[str, Engine]]:
    engines: dict[str, Engine] = {e.mode: Engine(address=e.address) for e in dind_pool}
    yield engines
    for e in engines.values():
        e.close()


def test_each_engine_runs_a_hardened_container_and_holds_the_machines_image_ids(
    pool: dict[str, Engine], dind_pool: list[DindEngine], engine: Engine, images: ImageSet
) -> None:
    assert sorted(pool) == ["ssh", "tcp", "tls"]
    for mode, inner in pool.items():
        for ref in (images.base, images.runtime, images.sidecar, images.trial):
            assert inner.image_id(ref) == engine.image_id(ref), f"{mode}: {ref}"
        run_id = "pool" + secrets.token_hex(3)
        spec = ContainerSpec(
            name=f"hx-{run_id}-probe",
            image=images.sidecar,
            command=("sh", "-c", "id -u; cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs)'"),
            labels=make_labels(run_id, role="probe", ttl_s=300, purpose="test"),
            user="65534:65534",
            limits=Limits(memory="64m", pids=16, tmpfs_size="1m"),
        )
        result = lifecycle.run(inner, spec, deadline_s=120)
        assert result.exit_code == 0, (mode, result.stderr)
        assert result.stdout.split() == [b"65534", b"CapEff:", b"0000000000000000", b"NoNewPrivs:", b"1"], mode
        assert inner.labelled() == [], f"{mode}: run() removed its container"
        info = inner.info()
        assert inner.endpoint().remote and info.kernel and info.cpus > 0 and info.engine_id
    ids = {pool[e.mode].info().engine_id for e in dind_pool}
    assert len(ids) == 3, "three engines, not one reached three ways"


def test_images_copy_over_tls_and_ssh_and_an_engine_holding_other_ids_is_refused(
    pool: dict[str, Engine], images: ImageSet
) -> None:
    tag = f"harness-pooltest:{secrets.token_hex(4)}"
    base_id = pool["tcp"].image_id(images.base)
    assert base_id is not None
    pool["tcp"].tag(base_id, tag)
    try:
        for mode in ("tls", "ssh"):
            done = sync_images(pool["tcp"], pool[mode], [tag], name=mode, reference_name="tcp")
            assert done.copied == (tag,), mode
            assert pool[mode].image_id(tag) == base_id, mode
        again = sync_images(pool["tcp"], pool["ssh"], [tag], name="ssh", reference_name="tcp")
        assert again.copied == () and again.present == (tag,)
        other = pool["ssh"].image_id(images.runtime)
        assert other is not None and other != base_id
        pool["ssh"].tag(other, tag)  # the same tag, another image: as a build made on that engine would be
        with pytest.raises(ImageMismatch, match=f"engine ssh holds other images under the harness's tags .{tag} is"):
            sync_images(pool["tcp"], pool["ssh"], [tag], name="ssh", reference_name="tcp")
        assert pool["ssh"].image_id(tag) == other, "nothing was copied over it"
    finally:
        for inner in pool.values():
            inner.remove_image(tag)


def test_doctor_checks_every_engine_of_an_engines_file(
    dind_pool: list[DindEngine], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["engines:", "  - url: unix:///var/run/docker.sock"]
    for e in dind_pool:
        lines.append(f"  - url: {e.address.url}\n    name: {e.address.name}")
        if e.address.cert_path is not None:
            lines.append(f"    cert_path: {e.address.cert_path}")
        if e.address.ssh_config is not None:
            lines.append(f"    ssh_config: {e.address.ssh_config}")
    listed = tmp_path / "engines.yaml"
    listed.write_text("\n".join(lines) + "\n")
    code = main(["doctor", "--engines-file", str(listed)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "4 of 4 engines usable" in out
    for e in dind_pool:
        block = out.split(f"engine {e.address.name} ({e.address.url})")[1].split("\nengine ")[0]
        assert "[ok  ] images: the same ids as local" in block, block
        assert "[ok  ] overlay volumes" in block and "GiB under its volumes" in block, block
        assert "kernel" in block and "CPUs" in block, block
