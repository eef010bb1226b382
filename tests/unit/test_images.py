"""harness.sandbox.images: content-hash tags and pruning of earlier builds (the fake image store; no Docker)."""

from __future__ import annotations

from pathlib import Path

from harness.sandbox.images import BUILD_STAGE_LABEL, REPOSITORIES, ImageBuilder, ImageOptions
from harness.sandbox.runtime import ContainerSpec
from tests.fakes import FakeRuntime


def current_tags(extra_ca: Path) -> dict[str, str]:
    """The tags the builder plans for a fake base id, resolved one layer at a time."""
    store = FakeRuntime()
    builder = ImageBuilder(store, ImageOptions(extra_ca=extra_ca))
    store.add_image(builder.base_tag(), "sha256:base")
    store.add_image(builder.planned()["runtime"][0], "sha256:runtime")
    plan = builder.planned()
    store.add_image(plan["sidecar"][0], "sha256:sidecar")
    store.add_image(plan["trial"][0], "sha256:trial")
    return store.tags


def test_tags_change_with_their_inputs(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("one")
    first = current_tags(ca)
    ca.write_text("two")
    second = current_tags(ca)
    assert first.keys() != second.keys(), "a different CA bundle must give different runtime/trial tags"
    assert current_tags(ca).keys() == second.keys(), "the same inputs give the same tags"


def test_prune_removes_earlier_builds_and_keeps_the_current_and_the_in_use(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("ca")
    tags = current_tags(ca)
    old = {"harness-trial:0000000000000000": "sha256:old1", "harness-sidecar:1111111111111111": "sha256:old2"}
    busy = "harness-trial:2222222222222222"
    foreign = {"debian:bookworm-slim": "sha256:deb", "mytool:latest": "sha256:mine"}
    store = FakeRuntime(images={**tags, **old, busy: "sha256:busy", **foreign})
    store.create(ContainerSpec(name="running-experiment", image=busy, command=("true",), labels={}, user="1:1"))
    removed, kept = ImageBuilder(store, ImageOptions(extra_ca=ca)).prune()
    assert sorted(removed) == sorted(old)
    assert busy in kept, "an image a container uses stays"
    assert set(tags) <= set(kept)
    assert all(tag in store.tags for tag in foreign), "images of other repositories are never touched"
    assert set(REPOSITORIES) == {"harness-base", "harness-runtime", "harness-sidecar", "harness-trial", "harness-codex"}


def test_the_codex_image_has_its_own_tag_and_leaves_the_claude_code_images_alone(tmp_path: Path) -> None:
    """Issue 30: the Codex CLI's image hashes its own Dockerfile and version; pinning another Codex version
    changes no other tag (no Claude Code trial image rebuilds), and prune keeps the current one only."""
    ca = tmp_path / "ca.crt"
    ca.write_text("ca")
    tags = current_tags(ca)
    store = FakeRuntime(images=tags)
    plans = [ImageBuilder(store, ImageOptions(extra_ca=ca, codex_version=v)).planned() for v in ("0.171.0", "0.172.0")]
    assert plans[0]["codex"][0].startswith("harness-codex:") and plans[0]["codex"] != plans[1]["codex"]
    assert {k: v for k, v in plans[0].items() if k != "codex"} == {k: v for k, v in plans[1].items() if k != "codex"}
    current, earlier = plans[0]["codex"][0], plans[1]["codex"][0]
    store.add_image(current, "sha256:codex")
    store.add_image(earlier, "sha256:codex-old")
    removed, kept = ImageBuilder(store, ImageOptions(extra_ca=ca)).prune()
    assert removed == [earlier] and current in kept


def test_prune_removes_the_untagged_build_stages_of_our_builds_only(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("ca")
    ours, foreign = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    store = FakeRuntime(images=current_tags(ca))
    store.add_build_stage(ours, {BUILD_STAGE_LABEL: "trial-cli", "harness.owner": "skill-harness"}, 2 * 10**9)
    store.add_build_stage(foreign, {"maintainer": "someone"}, 2 * 10**9)
    removed, _ = ImageBuilder(store, ImageOptions(extra_ca=ca)).prune()
    assert removed == ["aaaaaaaaaaaa (build stage, 2.00 GB)"]
    assert ours not in store.image_meta
    assert foreign in store.image_meta, "an untagged image without our label is not ours to remove"


def test_the_trial_dockerfile_labels_its_npm_stage() -> None:
    text = (Path(__file__).parents[2] / "Dockerfile.trial").read_text()
    stage = text.split("AS cli", 1)[1].split("\nFROM ", 1)[0]
    assert f'{BUILD_STAGE_LABEL}="trial-cli"' in stage
