"""Images without a registry, tagged by the hash of their inputs.

Four images, each built FROM the previous so layers are shared:

    harness-base:<h>      Debian bookworm: pulled when a registry answers, else
                          built here with ``debootstrap --variant=minbase`` and
                          ``docker import`` (air-gapped runners, these machines)
    harness-runtime:<h>   + python3, git, CA bundle (images/runtime/Dockerfile)
    harness-sidecar:<h>   + the gateway and scripted API code (images/sidecar/Dockerfile)
    harness-trial:<h>     Dockerfile.trial: the pinned Claude Code CLI on BASE_IMAGE

and a fifth, built only when asked for (:meth:`ImageBuilder.ensure_codex`), on the same BASE_IMAGE:

    harness-codex:<h>     images/codex/Dockerfile: the pinned OpenAI Codex CLI (docs/agents.md)

A tag is a hash of everything that goes into the image (Dockerfile text, build
args, parent image id, files copied in, the extra CA bundle), so an unchanged
image is never rebuilt and a changed input always is. A host-wide file lock
keeps two builds of one image from racing.

Several engines run one image id (:func:`sync_images`): the images are built once, on a reference engine,
and copied to every other engine through the images API (``docker save`` streamed into ``docker load``:
ids and tags stay the same, so :meth:`ImageBuilder.ensure` there finds them and builds nothing). An engine
that holds one of the tags as another image (built there, from a later package mirror) is refused
(:class:`ImageMismatch`), never mixed in: provenance compares image ids.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from harness.errors import InfraError, PrerequisiteError
from harness.host.slots import host_lock
from harness.sandbox.runtime import ImageStore

CLAUDE_CODE_VERSION = "2.1.332"
CODEX_VERSION = "0.171.0"
"""``@openai/codex`` on npm: the newest release when it was pinned (docs/agents.md records what it does)."""
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
REGISTRY_BASE = "debian:bookworm-slim"
DEFAULT_EXTRA_CA = Path("/etc/ssl/certs/ca-certificates.crt")
LABELS = {"harness.owner": "skill-harness", "harness.purpose": "image"}
RUN_ROLES = ("base", "runtime", "sidecar", "trial")
"""The images a run of Claude Code trials needs on an engine (what a pool copies; the Codex image only when asked)."""
REPOSITORIES = ("harness-base", "harness-runtime", "harness-sidecar", "harness-trial", "harness-codex")
_PACKAGE = Path(__file__).resolve().parents[1]
"""The installed ``harness`` package directory."""
BUILD_STAGE_LABEL = "harness.build-stage"
"""Set on the intermediate stages of our Dockerfiles, which the engine keeps as untagged images."""


def project_root() -> Path:
    return _PACKAGE.parent


def assets_root() -> Path:
    """Where ``Dockerfile.trial``, ``images/`` and the demo's ``examples/`` are: the copy an installed
    wheel carries in ``harness/assets/`` (written by setup.py), else the checkout (``pip install -e``)."""
    packaged = _PACKAGE / "assets"
    return packaged if (packaged / "Dockerfile.trial").is_file() else project_root()


@dataclass(frozen=True)
class ImageSet:
    base: str
    runtime: str
    sidecar: str
    trial: str
    trial_id: str
    """Image id (sha256:...) of the trial image: the digest recorded in every result line."""
    sidecar_id: str
    claude_code_version: str
    codex: CodexImage | None = None
    """The Codex CLI's image, when the run's agent is Codex (:meth:`ImageBuilder.ensure_codex`)."""


@dataclass(frozen=True)
class CodexImage:
    tag: str
    image_id: str
    """sha256:...: the digest a Codex trial records."""
    codex_version: str


@dataclass(frozen=True)
class ImageOptions:
    trial_base: str | None = None
    """BASE_IMAGE for Dockerfile.trial; default: the harness runtime image."""
    claude_code_version: str = CLAUDE_CODE_VERSION
    codex_version: str = CODEX_VERSION
    extra_ca: Path | None = None
    """Extra CA bundle for TLS-intercepting proxies; default: the host's bundle when present."""
    root: Path | None = None
    """Where Dockerfile.trial and images/ live; default: :func:`assets_root` (package data, else the checkout)."""


def _h(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:16]


SLIM_DPKG = """\
# Written by skill-harness: keep documentation out of every later package install
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
"""
SLIM_APT = 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };\n'


def slim(rootfs: Path) -> None:
    """What debian:bookworm-slim does and debootstrap does not: no docs, no cached packages."""
    for junk in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt"):
        shutil.rmtree(rootfs / junk, ignore_errors=True)
    (rootfs / "usr/share/locale").mkdir(parents=True, exist_ok=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/dpkg/dpkg.cfg.d/harness-slim").write_text(SLIM_DPKG)
    (rootfs / "etc/apt/apt.conf.d/harness-clean").write_text(SLIM_APT)
    for log in ("var/log/dpkg.log", "var/log/bootstrap.log", "var/log/alternatives.log"):
        (rootfs / log).unlink(missing_ok=True)


def base_tag() -> str:
    """The base image's tag: a hash of the debootstrap recipe alone, so the same on every machine and known
    without an engine. The other tags hash their parent's image id, which the engine assigns (``docker
    import`` of a debootstrap tree is not reproducible): ``skilltrial images status`` shows them."""
    return f"harness-base:{DEBIAN_SUITE}-{_h(DEBIAN_SUITE, 'minbase', DEBIAN_MIRROR, SLIM_DPKG, SLIM_APT)}"


class Pruned(NamedTuple):
    removed: list[str]
    """Image tags (and build stages, with their size) removed."""
    kept: list[str]
    """The current set, and earlier images a container still uses."""


class ImageBuilder:
    def __init__(
        self, engine: ImageStore, options: ImageOptions | None = None, on_line: Callable[[str], None] | None = None
    ) -> None:
        self.engine = engine
        self.options = options or ImageOptions()
        self.on_line = on_line or (lambda _line: None)
        self.root = self.options.root or assets_root()

    # -------------------------------------------------------------- inputs
    def _file(self, rel: str) -> Path:
        path = self.root / rel
        if not path.is_file():
            raise PrerequisiteError(
                f"{path} is missing",
                hint="reinstall the harness (pip install / pipx install builds them into the package) "
                "or run it from its checkout",
            )
        return path

    def _extra_ca(self) -> bytes:
        path = self.options.extra_ca
        if path is None:
            path = DEFAULT_EXTRA_CA if DEFAULT_EXTRA_CA.is_file() else None
        if path is None:
            return b""
        try:
            return path.read_bytes()
        except OSError as e:
            raise PrerequisiteError(f"extra CA bundle {path} cannot be read: {e.strerror}") from None

    # ---------------------------------------------------------------- tags
    def base_tag(self) -> str:
        return base_tag()

    def _runtime_inputs(self, base_id: str) -> tuple[str, bytes]:
        dockerfile = self._file("images/runtime/Dockerfile").read_bytes()
        return f"harness-runtime:{_h(dockerfile, base_id, self._extra_ca())}", dockerfile

    def _sidecar_files(self) -> dict[str, bytes]:
        src = _PACKAGE / "sidecars"
        return {p.name: p.read_bytes() for p in sorted(src.iterdir()) if p.suffix in {".py", ".sh"}}

    def _sidecar_tag(self, runtime_id: str) -> str:
        dockerfile = self._file("images/sidecar/Dockerfile").read_bytes()
        files = self._sidecar_files()
        return f"harness-sidecar:{_h(dockerfile, runtime_id, *[k.encode() + v for k, v in files.items()])}"

    def _trial_tag(self, runtime_id: str, trial_base_id: str) -> str:
        dockerfile = self._file("Dockerfile.trial").read_bytes()
        version = self.options.claude_code_version
        return f"harness-trial:{_h(dockerfile, runtime_id, trial_base_id, version, self._extra_ca())}"

    def _codex_tag(self, runtime_id: str, trial_base_id: str) -> str:
        dockerfile = self._file("images/codex/Dockerfile").read_bytes()
        version = self.options.codex_version
        return f"harness-codex:{_h(dockerfile, runtime_id, trial_base_id, version, self._extra_ca())}"

    # --------------------------------------------------------------- status
    def planned(self) -> dict[str, tuple[str, bool]]:
        """Tag and presence of each image, without building anything (for doctor)."""
        out: dict[str, tuple[str, bool]] = {}
        base = self.base_tag()
        base_id = self.engine.image_id(base) or self.engine.image_id(REGISTRY_BASE)
        out["base"] = (base if self.engine.image_id(base) else REGISTRY_BASE, base_id is not None)
        if base_id is None:
            return out
        runtime, _ = self._runtime_inputs(base_id)
        runtime_id = self.engine.image_id(runtime)
        out["runtime"] = (runtime, runtime_id is not None)
        if runtime_id is None:
            return out
        sidecar = self._sidecar_tag(runtime_id)
        out["sidecar"] = (sidecar, self.engine.image_id(sidecar) is not None)
        trial_base_id = self.engine.image_id(self.options.trial_base) if self.options.trial_base else runtime_id
        if trial_base_id:
            trial = self._trial_tag(runtime_id, trial_base_id)
            out["trial"] = (trial, self.engine.image_id(trial) is not None)
            codex = self._codex_tag(runtime_id, trial_base_id)
            out["codex"] = (codex, self.engine.image_id(codex) is not None)
        return out

    def prune(self) -> Pruned:
        """Remove harness images other than the current set (earlier builds), and the untagged npm
        stages every trial-image build leaves behind (about 2 GB each; a rebuild of the same CLI
        version then runs npm again)."""
        current = {tag for tag, present in self.planned().values() if present}
        removed: list[str] = []
        kept: list[str] = []
        for tag in self.engine.image_tags(REPOSITORIES):
            if tag in current:
                kept.append(tag)
            elif self.engine.remove_image(tag):
                removed.append(tag)
            else:
                kept.append(tag)  # in use by a container (a running experiment)
        for image_id, size in self.engine.dangling_images(BUILD_STAGE_LABEL):
            # listed after the untagging above, which can leave more stages dangling
            if self.engine.remove_image(image_id):
                removed.append(f"{image_id.removeprefix('sha256:')[:12]} (build stage, {size / 1e9:.2f} GB)")
        return Pruned(removed, kept)

    # ---------------------------------------------------------------- build
    def ensure(self) -> ImageSet:
        """Every image present (building only what is missing); returns their tags and ids."""
        base, base_id = self._ensure_base()
        runtime, runtime_id = self._ensure_built(
            self._runtime_inputs(base_id)[0], "images/runtime/Dockerfile", {"BASE_IMAGE": base}
        )
        sidecar_tag = self._sidecar_tag(runtime_id)
        sidecar, sidecar_id = self._ensure_built(
            sidecar_tag, "images/sidecar/Dockerfile", {"RUNTIME_IMAGE": runtime}, sidecar=True
        )
        trial_base = self.options.trial_base or runtime
        trial_base_id = self.engine.image_id(trial_base)
        if trial_base_id is None and self.options.trial_base and not self.engine.try_pull(trial_base):
            raise PrerequisiteError(
                f"BASE_IMAGE {trial_base} is not present and cannot be pulled",
                hint="build or load it first, or leave BASE_IMAGE unset to use the harness runtime image",
            )
        trial_base_id = trial_base_id or self.engine.image_id(trial_base) or ""
        trial, trial_id = self._ensure_built(
            self._trial_tag(runtime_id, trial_base_id),
            "Dockerfile.trial",
            {
                "BASE_IMAGE": trial_base,
                "BUILDER_IMAGE": runtime,
                "CLAUDE_CODE_VERSION": self.options.claude_code_version,
            },
        )
        return ImageSet(base, runtime, sidecar, trial, trial_id, sidecar_id, self.options.claude_code_version)

    def ensure_codex(self, images: ImageSet) -> CodexImage:
        """The Codex trial image on the same BASE_IMAGE as ``images.trial`` (built when missing). A second
        image, not a stage of Dockerfile.trial, so the Claude Code image and its tag stay as they are."""
        runtime_id = self.engine.image_id(images.runtime) or ""
        trial_base = self.options.trial_base or images.runtime
        trial_base_id = self.engine.image_id(trial_base) or ""
        tag, image_id = self._ensure_built(
            self._codex_tag(runtime_id, trial_base_id),
            "images/codex/Dockerfile",
            {"BASE_IMAGE": trial_base, "BUILDER_IMAGE": images.runtime, "CODEX_VERSION": self.options.codex_version},
        )
        return CodexImage(tag, image_id, self.options.codex_version)

    def _ensure_base(self) -> tuple[str, str]:
        tag = self.base_tag()
        with host_lock("build-base"):
            image = self.engine.image_id(tag)
            if image:
                return tag, image
            image = self.engine.image_id(REGISTRY_BASE)
            if image is None and self.engine.try_pull(REGISTRY_BASE):
                image = self.engine.image_id(REGISTRY_BASE)
            if image is not None:
                self.engine.tag(image, tag)
                return tag, image
            self.on_line(f"no registry answers: building {tag} with debootstrap from {DEBIAN_MIRROR}")
            return tag, self._debootstrap(tag)

    def _debootstrap(self, tag: str) -> str:
        if shutil.which("debootstrap") is None:
            raise PrerequisiteError(
                "no base image: the registry cannot be reached and debootstrap is not installed",
                hint="apt-get install debootstrap (make engine does this as root), or load debian:bookworm-slim",
            )
        if os.geteuid() != 0:
            raise PrerequisiteError(
                "no base image: the registry cannot be reached and debootstrap needs root",
                hint="run `sudo make images` once, or `docker load` a debian:bookworm-slim image",
            )
        with tempfile.TemporaryDirectory(prefix="harness-rootfs-", dir="/var/tmp") as tmp:
            rootfs = Path(tmp) / "rootfs"
            cmd = ["debootstrap", "--variant=minbase", DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR]
            proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
            if proc.returncode != 0:
                raise InfraError(
                    f"debootstrap failed (exit {proc.returncode})", hint=(proc.stdout + proc.stderr)[-1500:]
                )
            slim(rootfs)
            tarball = Path(tmp) / "rootfs.tar"
            proc = subprocess.run(
                ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if proc.returncode != 0:
                raise InfraError(f"packing the debootstrap rootfs failed: {proc.stderr[-500:]}")
            return self.engine.import_rootfs(
                tarball,
                tag=tag,
                changes=[
                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "ENV DEBIAN_FRONTEND=noninteractive",
                    'CMD ["/bin/bash"]',
                ],
            )

    def _ensure_built(
        self, tag: str, dockerfile: str, buildargs: Mapping[str, str], *, sidecar: bool = False
    ) -> tuple[str, str]:
        with host_lock("build-" + tag.replace(":", "_")):
            image = self.engine.image_id(tag)
            if image:
                return tag, image
            self.on_line(f"building {tag} ({dockerfile})")
            with tempfile.TemporaryDirectory(prefix="harness-build-") as tmp:
                context = Path(tmp)
                shutil.copy(self._file(dockerfile), context / "Dockerfile")
                (context / "extra-ca.crt").write_bytes(self._extra_ca())
                if sidecar:
                    (context / "sidecars").mkdir()
                    for name, data in self._sidecar_files().items():
                        (context / "sidecars" / name).write_bytes(data)
                image = self.engine.build(
                    context, dockerfile="Dockerfile", tag=tag, buildargs=buildargs, labels=LABELS, on_line=self.on_line
                )
            return tag, image


# ------------------------------------------------------------------ several engines


class ImageMismatch(PrerequisiteError):
    """An engine holds an image tag as another image than the reference engine: its trials would not run
    the image the others run, so it is refused rather than mixed in."""


@dataclass(frozen=True)
class ImageSync:
    """What :func:`sync_images` did on one engine."""

    engine: str
    copied: tuple[str, ...]
    """Refs that were missing there and were loaded from the reference engine."""
    present: tuple[str, ...]
    """Refs it already held, with the reference's image id."""
    seconds: float


def reference_ids(reference: ImageStore, refs: Sequence[str], *, name: str) -> dict[str, str]:
    """The image id of each ref on the reference engine; a ref it does not hold is a PrerequisiteError."""
    ids = {ref: reference.image_id(ref) for ref in refs}
    missing = [ref for ref, image in ids.items() if image is None]
    if missing:
        raise PrerequisiteError(
            f"the reference engine {name} does not hold {', '.join(missing)}",
            hint="build them there first (skilltrial images build)",
        )
    return {ref: image for ref, image in ids.items() if image is not None}


def differing(expected: Mapping[str, str], target: ImageStore) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The refs ``target`` lacks, and those it holds as another image: ``(ref, expected id, its id)``."""
    missing: list[str] = []
    other: list[tuple[str, str, str]] = []
    for ref, image in expected.items():
        found = target.image_id(ref)
        if found is None:
            missing.append(ref)
        elif found != image:
            other.append((ref, image, found))
    return missing, other


def _refuse(name: str, reference_name: str, other: Sequence[tuple[str, str, str]]) -> ImageMismatch:
    first = "; ".join(f"{ref} is {found[:19]} there, {image[:19]} on {reference_name}" for ref, image, found in other)
    return ImageMismatch(
        f"engine {name} holds other images under the harness's tags ({first}): its trials would not run the "
        "same image ids as the others, so it is not used",
        hint=f"remove those tags on {name} (docker rmi TAG there) and they are copied from {reference_name}, "
        "or leave the engine out",
    )


def sync_images(
    reference: ImageStore,
    target: ImageStore,
    refs: Sequence[str],
    *,
    name: str,
    reference_name: str = "the reference engine",
) -> ImageSync:
    """Make ``target`` hold every ref of ``refs`` as the same image id as ``reference``: what it lacks is
    copied in one stream (``save_images`` there, ``load_images`` here; shared layers once). Raises
    :class:`ImageMismatch` when ``target`` holds a ref as another image (nothing is copied then),
    PrerequisiteError when the reference lacks one, InfraError when the copy fails or does not give the
    same ids."""
    t0 = time.monotonic()
    expected = reference_ids(reference, refs, name=reference_name)
    missing, other = differing(expected, target)
    if other:
        raise _refuse(name, reference_name, other)
    if missing:
        target.load_images(reference.save_images(missing))
        still, other = differing(expected, target)
        if still or other:
            wrong = ", ".join(still + [ref for ref, _, _ in other])
            raise InfraError(f"copying images to engine {name} did not give it the reference's ids: {wrong}")
    present = tuple(ref for ref in refs if ref not in missing)
    return ImageSync(name, tuple(missing), present, time.monotonic() - t0)
