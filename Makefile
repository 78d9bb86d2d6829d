# Two commands for a fresh machine: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-fast bench prometheus chromium victoria-metrics wrk control-plane helm clean image

# The image, tagged with the package version: `make image IMAGE=registry.example/gpu-balancer`.
IMAGE ?= ghcr.io/gpu-balancer/gpu-balancer
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,sim]'
	touch $(STAMP)

# $(call debian,COMMAND,WHEN-MISSING): install the Debian package COMMAND names when it is missing
# and we are root; otherwise run WHEN-MISSING (a message, and `exit 1` where it is required).
define debian
	@command -v $(1) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's $(1) package..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(1) >/dev/null; \
	  else \
	    $(2); \
	  fi; }
endef

# Required: tests and the demo start their own Prometheus on loopback.
prometheus:
	$(call debian,prometheus,echo "prometheus is not installed: run 'sudo apt-get install prometheus'"; exit 1)

# Headless chromium renders the simulation report in a test; optional elsewhere.
chromium:
	$(call debian,chromium,echo "chromium is not installed: the report-rendering test is skipped")

# wrk, the load benches' HTTP client: the tests run every bench at a tiny size (tests/test_benches.py).
wrk:
	$(call debian,wrk,echo "wrk is not installed: the load benches' tests are skipped")

# Single-node VictoriaMetrics, the second time-series backend the tests read through.
victoria-metrics:
	$(call debian,victoria-metrics,echo "victoria-metrics is not installed: its tests are skipped")

# The real control plane of the control_plane tests (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, KWOK), built from the Go module proxy into a cache keyed by version:
# tens of minutes cold on 2 cores, seconds after. Without Go the tests are skipped, except under CI.
control-plane:
	@if command -v go >/dev/null 2>&1; then bash controlplane/build.sh >/dev/null; \
	elif [ "$$CI" = true ]; then echo "Go is not installed: the control plane cannot be built (CI requires it)"; exit 1; \
	else echo "Go is not installed: the control_plane tests are skipped"; fi

# Helm for the chart tests (lint, template, install on the control plane), built from the Go module
# proxy at a pinned version into a versioned cache: about 5 minutes cold on 2 cores, nothing after.
# Without Go the chart tests are skipped, except under CI.
helm:
	@if command -v go >/dev/null 2>&1; then bash controlplane/build-helm.sh >/dev/null; \
	elif [ "$$CI" = true ]; then echo "Go is not installed: Helm cannot be built (CI requires it)"; exit 1; \
	else echo "Go is not installed: the Helm chart tests are skipped"; fi

demo: $(STAMP)
	@$(MAKE) --no-print-directory prometheus || echo "(continuing without Prometheus)"
	$(VENV)/bin/gpu-balancer demo

test: $(STAMP) prometheus chromium victoria-metrics wrk control-plane helm
	$(PY) -m pytest

# For development: everything but the real control plane.
test-fast: $(STAMP) prometheus chromium victoria-metrics wrk helm
	$(PY) -m pytest -k "not control_plane"

bench: $(STAMP) prometheus
	$(PY) bench/snapshot_scale.py

image:
	docker build -t $(IMAGE):$(VERSION) .
	@echo "built $(IMAGE):$(VERSION); push it with: docker push $(IMAGE):$(VERSION)"

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
