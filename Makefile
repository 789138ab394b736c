# Two entry points: `make demo` and `make test`. Each bootstraps what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Debian packages the tests and the demo use (installed when missing, as root): OVN for
# the overlay (central, and a chassis: ovn-host, openvswitch-switch), the reference CNI
# plugins (podnet-ipam's clients), containerd, runc and busybox-static for the real
# container (test_container); prometheus for its promtool, which checks the /metrics
# exposition (test_metrics: 19 MB, ~16 s to install); musl-tools builds the static CNI
# plugin (scripts/build-cni.sh); python3-openvswitch for its C JSON parser, which the
# OVN provider's `ovs` package from pip lacks (scripts/ovs-json-parser.sh).
DEBS   ?= ovn-central ovn-host openvswitch-switch python3-openvswitch containernetworking-plugins containerd runc busybox-static prometheus nftables jq curl musl-tools

.PHONY: demo test check lint typecheck importlint unit bench clean cni

$(STAMP): pyproject.toml scripts/bootstrap.sh scripts/ovs-json-parser.sh
	@bash scripts/bootstrap.sh "$(PYTHON)" "$(VENV)" "$(DEBS)"
	@touch $(STAMP)

# The static CNI plugin beside the podnet scripts, as podnet-cni and podnet-ipam (where
# `podnet install-cni` takes it from). Always asked: the script itself skips an
# up-to-date build and replaces whatever else has those names (an older venv's Python
# console scripts, which may look newer than the C source).
cni: $(STAMP)
	@bash scripts/build-cni.sh "$(VENV)/bin"

demo: $(STAMP) cni
	$(VENV)/bin/podnet demo $(ARGS)

test: $(STAMP) cni lint typecheck importlint unit

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	@bash scripts/typecheck.sh "$(VENV)"

importlint: $(STAMP)
	$(VENV)/bin/lint-imports

# Test files are spread over PYTEST_WORKERS processes (pytest-xdist), each file whole on
# one of them (its module fixtures start once), the long ones first (tests/conftest.py);
# PYTEST_WORKERS=0 runs in this process. Three on a 2-core machine: the slowest files wait
# on daemons, packets and timeouts more than they compute (pytest 14.6 min against 20.6
# with two, the tests' own seconds the same). The slowest tests and files are printed
# at the end (what LONG_FILES is refreshed from).
PYTEST_WORKERS ?= 3

unit: $(STAMP) cni
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 $(PYTEST_ARGS)

bench: $(STAMP) cni
	$(PY) bench/core_overhead.py

clean:
	rm -rf $(VENV) .typecheck .pytest_cache .mypy_cache .ruff_cache build *.egg-info
