# sparkctl — every target installs what it needs (venv, apt packages) before running.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_PACKAGES := systemd-container debootstrap openssh-client openssh-server iproute2 iputils-ping nftables rsync e2fsprogs util-linux procps

.PHONY: help venv sglang apt demo test unit integration lint bench lab-up lab-down clean

help:
	@echo "make demo   - bring the local lab up and run the whole flow on it (root, Linux)"
	@echo "make test   - lint + unit + CLI + integration tests (integration needs root)"
	@echo "make lint   - ruff, mypy, yamllint, ansible-lint (production profile)"
	@echo "make bench  - benchmarks under bench/ (ratios against in-run baselines)"

$(STAMP): pyproject.toml collections/requirements.yml
	@command -v $(PY) >/dev/null || { echo "python3 is required"; exit 2; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/python collections/install.py
	touch $(STAMP)

venv: $(STAMP)

# SGLang 0.5.23's parser (CPU only) in its own venv; `validate` uses it through SPARKCTL_SGLANG_PYTHON.
SGL_VENV := .venv-sglang
$(SGL_VENV)/.installed:
	$(PY) -m venv $(SGL_VENV)
	$(SGL_VENV)/bin/pip install -q --no-deps sglang==0.5.23
	$(SGL_VENV)/bin/pip install -q msgspec psutil pyzmq numpy orjson pybase64 requests packaging pillow \
	  starlette tqdm IPython aiohttp PyYAML pydantic
	touch $@

sglang: $(SGL_VENV)/.installed

# System packages the lab and the integration tests need (Debian/Ubuntu, root).
apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "need root to install:$$missing"; exit 2; fi; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

lint: venv
	$(BIN)/ruff check sparkctl sparkctl_lab sparkctl_sim tests bench plugins
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/yamllint -s .
	PATH=$(CURDIR)/$(BIN):$$PATH ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(BIN)/ansible-lint --profile production -q playbooks roles

unit: venv sglang
	SPARKCTL_SGLANG_PYTHON=$(CURDIR)/$(SGL_VENV)/bin/python $(BIN)/pytest -q tests/unit/test_sglang_parser.py
	$(BIN)/pytest -q tests/unit tests/cli

integration: venv apt
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -q -m integration tests/integration

# The README's test command: lint, then every test layer.
test: lint unit integration

demo: venv apt
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh

bench: venv apt
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/bench.sh

lab-up: venv apt
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/sparkctl lab up

lab-down: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/sparkctl lab down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .sparkctl results
