"""harness.sandbox.images: content-hash tags and pruning of earlier builds (a fake engine; no Docker)."""

from __future__ import annotations

from pathlib import Path

from harness.sandbox.images import BUILD_STAGE_LABEL, REPOSITORIES, ImageBuilder, ImageOptions


class FakeEngine:
    def __init__(
        self,
        tags: dict[str, str],
        in_use: set[str] = frozenset(),  # type: ignore[assignment]
        stages: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.tags = dict(tags)  # tag -> image id
        self.in_use = in_use
        self.stages = dict(stages or {})  # untagged image id -> its labels
        self.removed: list[str] = []

    def image_id(self, ref: str) -> str | None:
        return self.tags.get(ref)

    def image_tags(self, repositories: tuple[str, ...]) -> list[str]:
        return sorted(t for t in self.tags if t.rsplit(":", 1)[0] in repositories)

    def dangling_images(self, label: str) -> list[tuple[str, int]]:
        return [(image_id, 2 * 10**9) for image_id, labels in self.stages.items() if label in labels]

    def remove_image(self, tag: str) -> bool:
        if tag in self.in_use:
            return False
        self.removed.append(tag)
        if tag in self.stages:
            del self.stages[tag]
        else:
            del self.tags[tag]
        return True


def current_tags(extra_ca: Path) -> dict[str, str]:
    """The tags the builder plans for a fake base id, resolved one layer at a time."""
    engine = FakeEngine({})
    builder = ImageBuilder(engine, ImageOptions(extra_ca=extra_ca))  # type: ignore[arg-type]
    engine.tags[builder.base_tag()] = "sha256:base"
    runtime = builder.planned()["runtime"][0]
    engine.tags[runtime] = "sha256:runtime"
    plan = builder.planned()
    engine.tags[plan["sidecar"][0]] = "sha256:sidecar"
    engine.tags[plan["trial"][0]] = "sha256:trial"
    return engine.tags


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
    engine = FakeEngine({**tags, **old, busy: "sha256:busy", **foreign}, in_use={busy})
    removed, kept = ImageBuilder(engine, ImageOptions(extra_ca=ca)).prune()  # type: ignore[arg-type]
    assert sorted(removed) == sorted(old)
    assert busy in kept
    assert set(tags) <= set(kept)
    assert all(tag in engine.tags for tag in foreign), "images of other repositories are never touched"
    assert set(REPOSITORIES) == {"harness-base", "harness-runtime", "harness-sidecar", "harness-trial"}


def test_prune_removes_the_untagged_build_stages_of_our_builds_only(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("ca")
    ours = {"sha256:" + "a" * 64: {BUILD_STAGE_LABEL: "trial-cli", "harness.owner": "skill-harness"}}
    foreign = {"sha256:" + "b" * 64: {"maintainer": "someone"}}
    engine = FakeEngine(current_tags(ca), stages={**ours, **foreign})
    removed, _ = ImageBuilder(engine, ImageOptions(extra_ca=ca)).prune()  # type: ignore[arg-type]
    assert removed == ["aaaaaaaaaaaa (build stage, 2.00 GB)"]
    assert list(engine.stages) == list(foreign), "an untagged image without our label is not ours to remove"


def test_the_trial_dockerfile_labels_its_npm_stage() -> None:
    text = (Path(__file__).parents[2] / "Dockerfile.trial").read_text()
    stage = text.split("AS cli", 1)[1].split("\nFROM ", 1)[0]
    assert f'{BUILD_STAGE_LABEL}="trial-cli"' in stage
