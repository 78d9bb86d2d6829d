# Two commands for a fresh machine: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test bench prometheus chromium victoria-metrics clean image

# The image, tagged with the package version: `make image IMAGE=registry.example/gpu-balancer`.
IMAGE ?= ghcr.io/gpu-balancer/gpu-balancer
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian's prometheus package, installed when missing and we are root; otherwise a clear stop.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus package..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else \
	    echo "prometheus is not installed: run 'sudo apt-get install prometheus' (tests start their own on loopback)"; exit 1; \
	  fi; }

# Debian's headless chromium, for the test that renders the simulation report; optional elsewhere.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium package..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  else \
	    echo "chromium is not installed: the report-rendering test will be skipped ('sudo apt-get install chromium')"; \
	  fi; }

# Debian's single-node VictoriaMetrics, the second time-series backend the tests read through.
victoria-metrics:
	@command -v victoria-metrics >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's victoria-metrics package..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends victoria-metrics >/dev/null; \
	  else \
	    echo "victoria-metrics is not installed: its tests will be skipped ('sudo apt-get install victoria-metrics')"; \
	  fi; }

demo: $(STAMP)
	@$(MAKE) --no-print-directory prometheus || echo "(continuing without Prometheus)"
	$(VENV)/bin/gpu-balancer demo

test: $(STAMP) prometheus chromium victoria-metrics
	$(PY) -m pytest

bench: $(STAMP) prometheus
	$(PY) bench/snapshot_scale.py

image:
	docker build -t $(IMAGE):$(VERSION) .
	@echo "built $(IMAGE):$(VERSION); push it with: docker push $(IMAGE):$(VERSION)"

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
