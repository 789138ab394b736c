# Two entry points: `make demo` and `make test`. Each bootstraps what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Debian packages the tests and the demo use (installed when missing, as root): OVN for
# the overlay (central, and a chassis: ovn-host, openvswitch-switch), the reference CNI
# plugins (podnet-ipam's clients), containerd, runc and busybox-static for the real
# container (test_container); prometheus for its promtool, which checks the /metrics
# exposition (test_metrics: 19 MB, ~16 s to install).
DEBS   ?= ovn-central ovn-host openvswitch-switch containernetworking-plugins containerd runc busybox-static prometheus nftables jq curl

.PHONY: demo test check lint typecheck importlint unit bench clean

$(STAMP): pyproject.toml
	@bash scripts/bootstrap.sh "$(PYTHON)" "$(VENV)" "$(DEBS)"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/podnet demo $(ARGS)

test: $(STAMP) lint typecheck importlint unit

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	@bash scripts/typecheck.sh "$(VENV)"

importlint: $(STAMP)
	$(VENV)/bin/lint-imports

# Test files are spread over PYTEST_WORKERS processes (pytest-xdist), each file whole on
# one of them (its module fixtures start once), the long ones first (tests/conftest.py);
# PYTEST_WORKERS=0 runs in this process.
PYTEST_WORKERS ?= 2

unit: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/core_overhead.py

clean:
	rm -rf $(VENV) .typecheck .pytest_cache .mypy_cache .ruff_cache build *.egg-info
