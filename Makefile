# skilltrial: `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HARNESS := $(BIN)/skilltrial
SKILL ?=
PREREG ?=
OUT ?=
JOBS ?=
PYTEST_ARGS ?=
LINT_PATHS := harness tests scripts

.PHONY: help install engine images doctor demo eval test test-remote test-unit lint format typecheck check hooks bench gc clean schemas docs wheelhouse

WHEELHOUSE := wheelhouse

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo ""
	@echo "  make demo                 the whole A/B pipeline offline (scripted model, no key)"
	@echo "  make eval SKILL=path      a real evaluation (needs ANTHROPIC_API_KEY); PREREG=, OUT=, JOBS= optional"
	@echo "  make check                what CI runs before make test; .pre-commit-config.yaml runs the same (make hooks)"

$(BIN)/skilltrial: pyproject.toml
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip uninstall --quiet --yes skill-harness 2>/dev/null || true  # the distribution's earlier name
	@$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

install: $(BIN)/skilltrial ## create .venv and install the harness with its dev tools

engine: ## find a Docker engine (as root on Debian: install docker.io and start dockerd)
	@sh scripts/ensure-engine.sh

images: install engine ## build the images (content-hash tags: unchanged images are not rebuilt)
	@$(HARNESS) images build

doctor: install engine ## check engine, cgroups, disk, images, gVisor and known-CVE versions
	@$(HARNESS) doctor

demo: install engine ## run the demo experiment end to end against the scripted model and print the decision
	@$(HARNESS) demo $(if $(JOBS),--jobs $(JOBS))

eval: install ## evaluate SKILL=path/to/skill for real (ANTHROPIC_API_KEY; fails fast without it)
	@test -n "$(SKILL)" || { echo "usage: make eval SKILL=path/to/skill [PREREG=path/to/preregistration.yaml]" >&2; exit 4; }
	@test -n "$$ANTHROPIC_API_KEY" || { echo "make eval: ANTHROPIC_API_KEY is not set (try \`make demo\` for the offline pipeline)" >&2; exit 5; }
	@$(MAKE) --no-print-directory engine
	@$(HARNESS) eval --skill $(SKILL) $(PREREG) $(if $(JOBS),--jobs $(JOBS)) $(if $(OUT),--out $(OUT)) $(if $(UPSTREAM),--upstream $(UPSTREAM)) $(if $(UPSTREAM_CA),--upstream-ca $(UPSTREAM_CA))

test: install engine wheelhouse ## the whole test suite: unit tests and integration tests on the real engine, then test-remote
	@sh scripts/ensure-chromium.sh
	@sh scripts/ensure-shells.sh
	@$(HARNESS) images build >/dev/null
	@$(BIN)/pytest $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-remote

REMOTE_TESTS = tests/remote tests/contract tests/integration/test_pipeline.py tests/integration/test_volume_workspaces.py tests/security
test-remote: install engine ## the pipeline and isolation suites once more, on a docker-in-docker engine over TCP (tests/remote)
	@$(HARNESS) images build >/dev/null
	@$(BIN)/pytest --engine remote -m docker $(REMOTE_TESTS) $(PYTEST_ARGS)

test-unit: install ## unit tests and the fake half of the runtime contract (no Docker needed)
	@$(BIN)/pytest tests/unit tests/contract --no-docker $(PYTEST_ARGS)

# lint and typecheck are the commands .pre-commit-config.yaml runs (tests/unit/test_toolchain.py holds them equal)
lint: install ## ruff check and ruff format --check over harness, tests and scripts
	@$(BIN)/ruff check $(LINT_PATHS)
	@$(BIN)/ruff format --check $(LINT_PATHS)

format: install ## apply ruff's safe fixes and its formatting (what lint checks)
	@$(BIN)/ruff check --fix $(LINT_PATHS)
	@$(BIN)/ruff format $(LINT_PATHS)

typecheck: install ## mypy --strict over the package (sidecars included), tests and scripts (pyproject's files)
	@$(BIN)/mypy

check: lint typecheck test-unit ## lint, typecheck and unit tests: what CI runs before make test

wheelhouse: install ## build the wheel and sdist (twine check) and fetch every dependency's wheel into wheelhouse/: the install test installs from it with --no-index
	@mkdir -p $(WHEELHOUSE) && rm -f $(WHEELHOUSE)/skilltrial-*
	@$(BIN)/python -m build --no-isolation --sdist --wheel --outdir $(WHEELHOUSE) . >/dev/null
	@$(BIN)/twine check --strict $(WHEELHOUSE)/skilltrial-*
	@$(BIN)/pip download --quiet --disable-pip-version-check --only-binary=:all: --dest $(WHEELHOUSE) $(WHEELHOUSE)/skilltrial-*.whl 2>&1 | grep -v "is ignored" || true
	@test -n "$$(ls $(WHEELHOUSE)/pydantic-*.whl 2>/dev/null)" || { echo "make wheelhouse: the dependencies were not downloaded" >&2; exit 5; }

docs: install ## build the docs site into site/ (mkdocs --strict checks every link) and check it references no other host
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # not --quiet: with it, --strict lets a warning pass (mkdocs 1.6)
	@$(BIN)/python scripts/check_site.py site

schemas: install ## regenerate the inputs' JSON Schemas from the models (harness/data/schemas; tests/unit/test_schemas.py compares)
	@$(HARNESS) schema --write harness/data/schemas

hooks: install ## install the git hooks of .pre-commit-config.yaml (lint and typecheck on commit, unit tests on push)
	@command -v pre-commit >/dev/null || { echo "make hooks: pre-commit is not installed (pipx install pre-commit)" >&2; exit 4; }
	@pre-commit install

bench: install engine ## benchmarks (ratios measured in one run) and the decision-rule simulation
	@$(BIN)/python scripts/bench.py
	@$(BIN)/python scripts/simulate_rules.py
	@$(BIN)/python scripts/simulate_library.py

gc: install ## remove containers and networks left by killed runs
	@$(HARNESS) gc

clean: ## remove the virtualenv, caches and demo output
	rm -rf $(VENV) demo-output bench-output site $(WHEELHOUSE) .pytest_cache .mypy_cache .ruff_cache
