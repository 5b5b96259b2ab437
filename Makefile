# sparkctl — every target installs what it needs (venv, apt packages) before running.
SHELL := /bin/bash
# The interpreter the venvs are made from: the distribution's own /usr/bin/python3 where it is 3.11+
# and can make a venv (Debian and Ubuntu build it with PGO and LTO), else python3 on PATH. A pyenv or
# source build without --enable-optimizations ran Ansible's controller side ~11 % slower here (a
# no-op `provision` of the lab: 10.1 against 9.0 CPU-seconds), and every lab test is mostly that.
ifeq ($(origin PY),undefined)
PY := $(shell for p in /usr/bin/python3 python3; do \
  $$p -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { echo $$p; exit; }; \
  done; echo python3)
endif
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_PACKAGES := systemd-container debootstrap openssh-client openssh-server iproute2 iputils-ping nftables rsync e2fsprogs util-linux procps prometheus git

.PHONY: help venv sglang apt demo test unit timing integration wheel-check constraints lint bench lab-up lab-down lab-down-all clean router-wheels integration-heavy

help:
	@echo "make demo   - bring the local lab up and run the whole flow on it (root, Linux)"
	@echo "make test   - lint + unit + CLI + integration tests (integration needs root)"
	@echo "make lint   - ruff, mypy, yamllint, ansible-lint (production profile)"
	@echo "make timing - the wall-clock tests alone (simulator speeds, timeouts, parallelism)"
	@echo "make bench  - benchmarks under bench/ (ratios against in-run baselines)"
	@echo "make wheel-check - build the wheel, install it in a fresh venv outside the tree, run it"
	@echo "make lab-up / lab-down - the local lab (lab 0); make lab-down-all - every lab the tests use"

# Installs exactly the versions CI tested (constraints.txt). A venv from before the distribution
# was renamed sparkctl-dgx still holds the old `sparkctl` editable install: it goes first.
$(STAMP): pyproject.toml setup.py constraints.txt collections/requirements.yml
	@command -v $(PY) >/dev/null || { echo "python3 is required"; exit 2; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip uninstall -q -y sparkctl 2>/dev/null || true
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/python collections/install.py
	touch $(STAMP)

# Bytecode for the tree's own Python (the project, the lab, the simulator, the plugins, the roles'
# plugins and module_utils, the collections): every `sparkctl` and `ansible-playbook` process
# imports them, and where PYTHONDONTWRITEBYTECODE is set (some CI images set it) Python compiled
# them afresh each time — a `sparkctl` command took 2.4 s instead of 1.1 s. compileall skips what
# is up to date.
PYC_DIRS := sparkctl sparkctl_lab sparkctl_sim plugins roles collections/ansible_collections
venv: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 $(PYC_DIRS) >/dev/null

# SGLang 0.5.23's parser (CPU only) in its own venv; `validate` uses it through SPARKCTL_SGLANG_PYTHON.
# SGLang itself without its GPU stack (--no-deps), then the modules its parser imports: the
# `sglang` extra of pyproject.toml, at the versions of constraints-sglang.txt.
SGL_VENV := .venv-sglang
SGL_DEPS = $$($(PY) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["sglang"]))')
$(SGL_VENV)/.installed: pyproject.toml constraints-sglang.txt
	$(PY) -m venv $(SGL_VENV)
	$(SGL_VENV)/bin/pip install -q -c constraints-sglang.txt --no-deps sglang
	$(SGL_VENV)/bin/pip install -q -c constraints-sglang.txt $(SGL_DEPS)
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

# UNIT_MARKS narrows the unit/CLI run (`make test` runs the wall-clock tests on their own first).
UNIT_MARKS ?= not integration
unit: venv sglang
	SPARKCTL_SGLANG_PYTHON=$(CURDIR)/$(SGL_VENV)/bin/python $(BIN)/pytest -q tests/unit/test_sglang_parser.py
	SPARKCTL_SGLANG_PYTHON=$(CURDIR)/$(SGL_VENV)/bin/python $(BIN)/sparkctl validate --strict -i inventory/example
	$(BIN)/pytest -q -n 4 -m "$(UNIT_MARKS)" tests/unit tests/cli

# The tests that hold the simulator's speeds, timeouts or parallelism to the wall clock: on a busy
# 2-core machine they would measure the machine, so `make test` runs them before anything else.
timing: venv
	$(BIN)/pytest -q -n 2 -m timing tests/unit tests/cli

# Includes tests/integration/test_wheel_install.py: the wheel check with `provision --check` on the lab.
# Three labs side by side, one stream of modules each (tests/integration/conftest.py: STREAMS):
# worker gwN drives lab N. `make lab-down-all` takes every one of them down.
LAB_STREAMS := 3
integration: venv apt router-wheels
	PATH=$(CURDIR)/$(BIN):$$PATH SPARKCTL_ROUTER_WHEELS=$${SPARKCTL_ROUTER_WHEELS:-$(ROUTER_WHEELS)} \
	  $(BIN)/pytest -q -n $(LAB_STREAMS) --durations=25 -m integration tests/integration

# The lab modules `make test` leaves out for their cost (tests/integration/conftest.py: HEAVY), on
# one lab (instance $$SPARKCTL_LAB_INSTANCE, default 0): eight nodes serving TP8, and as two TP4
# groups behind the router (its wheel as for `make integration`).
integration-heavy: venv apt router-wheels
	PATH=$(CURDIR)/$(BIN):$$PATH SPARKCTL_ROUTER_WHEELS=$${SPARKCTL_ROUTER_WHEELS:-$(ROUTER_WHEELS)} \
	  SPARKCTL_LAB_HEAVY=only $(BIN)/pytest -q --durations=10 -m integration tests/integration

# SGLang's gateway (the router) for the lab's router tests: the lab's nodes have no route out, so its
# x86_64 wheel comes from the controller, downloaded once (pip's own index configuration) into the
# lab's cache directory beside the rootfs and engine caches, and kept there. `integration` hands the
# directory to the tests as SPARKCTL_ROUTER_WHEELS (one set by the caller wins). A failed download
# fails nothing: the router tests then skip, saying the directory holds no wheel.
ROUTER_PACKAGE := smg==1.13.0
ROUTER_WHEEL := $(subst ==,-,$(ROUTER_PACKAGE))
ROUTER_WHEELS ?= $(or $(SPARKCTL_ROOTFS_CACHE),/var/cache/sparkctl)/router-wheels
router-wheels: venv
	@if ls $(ROUTER_WHEELS)/$(ROUTER_WHEEL)-*.whl >/dev/null 2>&1; then exit 0; fi; \
	tmp=$(ROUTER_WHEELS).part; rm -rf $$tmp; \
	if mkdir -p $$tmp && timeout 300 $(BIN)/pip download -q --no-deps --only-binary=:all: --timeout 30 \
	     --retries 2 $(ROUTER_PACKAGE) -d $$tmp && ls $$tmp/$(ROUTER_WHEEL)-*.whl >/dev/null 2>&1 \
	   && mkdir -p $(ROUTER_WHEELS) && mv $$tmp/*.whl $(ROUTER_WHEELS)/; then \
	  echo "router wheel: $$(ls $(ROUTER_WHEELS)/$(ROUTER_WHEEL)-*.whl)"; \
	else echo "router wheel ($(ROUTER_PACKAGE)) not downloaded: the router lab tests will skip"; fi; \
	rm -rf $$tmp

# The built wheel in a fresh venv outside the tree (scripts/wheel_check.sh); on the lab too when it is up.
wheel-check: venv
	bash scripts/wheel_check.sh $$([ -f inventory/lab/hosts.yml ] && echo --lab inventory/lab)

# After a dependency change: pin what the dev venv now holds (the project itself left out).
constraints: venv
	{ sed -n '/^#/p' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -iv '^sparkctl'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# The README's test command: lint and every test layer (integration includes the wheel check). The
# wall-clock tests (marker `timing`) run first, alone on the machine, then the other unit/CLI tests,
# alone too: beside the lab tests (which keep both cores busy) a unit test that waits on a subprocess,
# a socket or a server with a bound of a few seconds failed now and then, a different one each run,
# though it passes alone every time; alone they take about 4 minutes, and the lab tests lose little
# from not sharing the machine with them. Then the lab's one-time cache build (debootstrap: mostly
# downloads and unpacking; its log is $(LAB_BUILD_LOG)); then the lab tests, three labs side by side
# (one stream of modules each), with lint beside them ($(BESIDE)); its output ($(SIDE_LOG)) is printed
# at the end. The installs before all that run side by side (pip into the two venvs, apt-get for the
# lab's system packages): mostly downloads and unpacking.
LAB_BUILD_LOG := .lab-build.log
SIDE_LOG := .lint.log
# Beside the lab tests, lint takes what the lab leaves idle, mostly. With autogroup scheduling
# (/proc/sys/kernel/sched_autogroup_enabled) a nice value only ranks a task within its session, and
# each session competes at equal weight (every lab node's SSH session and every ansible-playbook run
# under a pty is one): plain `nice -n 19` took a third of the machine whenever the side jobs ran (lab
# tests 1,326 s beside them against 1,230 s alone). So lint gets a session of its own whose autogroup
# is niced to SIDE_NICE: 15 is about 1/28 of one busy session's share.
SIDE_NICE := 15
BESIDE := setsid --wait bash -c 'echo $(SIDE_NICE) > /proc/self/autogroup 2>/dev/null; exec nice -n $(SIDE_NICE) "$$@"' beside
test:
	@t=$$(date +%s); \
	took() { echo "[make test] $$1: $$(( $$(date +%s) - $$2 )) s"; }; \
	$(MAKE) --no-print-directory -j3 venv sglang apt || exit 1; took installs $$t; t=$$(date +%s); \
	$(MAKE) --no-print-directory timing || exit 1; took "wall-clock tests" $$t; t=$$(date +%s); \
	$(MAKE) --no-print-directory unit UNIT_MARKS="not integration and not timing" || exit 1; \
	took "unit/CLI tests" $$t; t=$$(date +%s); \
	if [ "$$(id -u)" = 0 ]; then \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/sparkctl lab build > $(LAB_BUILD_LOG) 2>&1 \
	    || { tail -n 30 $(LAB_BUILD_LOG); echo "sparkctl lab build failed"; exit 1; }; \
	fi; took "lab build" $$t; t=$$(date +%s); \
	( s=$$(date +%s); $(BESIDE) $(MAKE) --no-print-directory lint; lint_rc=$$?; \
	  echo "[make test] lint (beside the lab tests): $$(( $$(date +%s) - s )) s"; \
	  [ $$lint_rc = 0 ] || { echo "lint failed"; exit 1; } \
	) > $(SIDE_LOG) 2>&1 & \
	side=$$!; \
	$(MAKE) --no-print-directory integration; rc=$$?; took "lab (integration) tests" $$t; \
	wait $$side; side_rc=$$?; cat $(SIDE_LOG); took "lab tests and lint" $$t; \
	[ $$side_rc = 0 ] || exit 1; exit $$rc

demo: venv apt
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh

bench: venv apt
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/bench.sh

lab-up: venv apt
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/sparkctl lab up

lab-down: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/sparkctl lab down

lab-down-all: venv
	@for n in $$(seq 0 $$(( $(LAB_STREAMS) - 1 ))); do \
	  PATH=$(CURDIR)/$(BIN):$$PATH SPARKCTL_LAB_INSTANCE=$$n $(BIN)/sparkctl lab down || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .sparkctl results build dist
