"""The API emulator's common fixtures, and suite-wide ordering for parallel runs
(``make unit``: pytest-xdist, one file per worker at a time, in collection order with
``--no-loadscope-reorder``).

A worker that takes a chaos machine (200 histories) or an end-to-end file last keeps the
run going minutes after the other ran out of files; started first, the long files overlap
and the many short ones fill the gaps at the end. Only the workers' collection is
reordered (the order the controller hands files out in); a run in one process keeps the
files' own order.

``server`` (a fresh emulator per test, bookmarks every 0.2 s), ``api`` (the official
client on it) and ``core`` (its CoreV1Api) serve the emulator's tests; a file that needs
other options defines its own ``server``, which takes precedence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from podnet.sim.apiserver import ApiServer
from podnet.testing.nodebed import (
    NODE,
    POD_CIDR,
    NodeNamespace,
    Stack,
    Underlay,
    node_object,
)

# a chaos machine's failing history and its blob are printed as soon as it fails, and its
# shrinking is bounded in time (PODNET_CHAOS_SHRINK_SECONDS): the test's timeout never
# ends a run that found a failure before its history is in the log
pytest_plugins = ["podnet.testing.chaosreport"]


@pytest.fixture
def stack_factory(tmp_path: Path, underlay: Underlay) -> Iterator[Callable[..., Stack]]:
    """Node bed stacks (``podnet.testing.nodebed.Stack``) with the options a test chooses:
    the cluster in the underlay's router namespace, the apiserver on the router's underlay
    address, closed before the underlay goes (they depend on it). Every agent runs in a
    node namespace: in the router's, other checkouts' agents running at the same time
    would take its links for their leftovers. For files that load ``podnet.testing``."""
    made: list[Stack] = []

    def make(**options: Any) -> Stack:
        made.append(Stack(tmp_path, netns=underlay.router, address=underlay.router_address,
                          **options))
        return made[-1]

    try:
        yield make
    finally:
        for s in made:
            s.close()


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    """A node bed stack with the default options."""
    return stack_factory()


@pytest.fixture
def node(stack: Stack, underlay: Underlay) -> NodeNamespace:
    """:data:`~podnet.testing.nodebed.NODE` as a namespace of its own on the underlay, its
    Node created (no agent yet)."""
    n = underlay.add_node(NODE, POD_CIDR)
    stack.create([node_object(NODE, POD_CIDR, n.address)])
    return n


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer(bookmark_interval=0.2) as srv:
        yield srv


@pytest.fixture
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


#: the longest files and the seconds each took in a fresh-clone CI run with three workers
#: on the 2-core machine (their tests' sum from the "slowest files" list the unit target's
#: ``--durations`` prints; refresh from there): handed out first, longest first, so that
#: no long file starts when the other workers are nearly out of files
LONG_FILES = {
    "tests/test_netpol_truth_ecs.py": 220,
    "tests/test_netpol_truth_ovn.py": 155,
    "tests/test_netpol_truth.py": 150,
    "tests/test_node_agent.py": 145,
    "tests/test_ovn_chaos.py": 125,
    "tests/test_eni_dataplane.py": 125,
    "tests/test_node_agent_requests.py": 110,
    "tests/test_ecs_chaos.py": 100,
    "tests/test_cni_ipam.py": 90,
    "tests/test_e2e_run.py": 85,
    "tests/test_ovn_dataplane.py": 85,
    "tests/test_nftables_packets.py": 65,
    "tests/test_bbc_chaos.py": 60,
    "tests/test_reference_chaos.py": 55,
    "tests/test_cli_mistakes.py": 50,
    "tests/test_ovn_netpol_dataplane.py": 45,
    "tests/test_node_agent_lifecycle.py": 40,
    "tests/test_e2e_ownership.py": 40,
}


def _weight(item: pytest.Item) -> tuple[int, float]:
    """A file's place in the hand-out order: the :data:`LONG_FILES` by their seconds,
    then a chaos machine's file, a file with a slow test, the rest."""
    seconds = LONG_FILES.get(item.nodeid.split("::", 1)[0])
    if seconds is not None:
        return (0, -seconds)
    if "chaos" in item.path.name:
        return (1, 0.0)
    return (2 if item.get_closest_marker("slow") else 3, 0.0)


# A chaos machine runs 200 random histories: 110-260 s on 2 cores shared with the other
# worker; the suite's 300 s would cut a slow but passing run (a hang still dumps every
# thread's stack at faulthandler_timeout, 240 s, before this ends it).
CHAOS_TIMEOUT = 600


def chaos_timeout(config: pytest.Config) -> float | None:
    """The chaos files' timeout: :data:`CHAOS_TIMEOUT`, or none when the run lifts the
    suite's (``--timeout=0`` or ``-o timeout=0``: a deep run, 2,000 histories)."""
    given = config.getoption("timeout", None)
    if given is None:
        given = config.getini("timeout") or None
    if given is not None and float(given) <= 0:
        return None
    return CHAOS_TIMEOUT


#: test file -> seconds its tests took (setup, call and teardown; a module fixture's start
#: is in its first test's setup), summed from the reports, the workers' ones included
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    file = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[file] = _FILE_SECONDS.get(file, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    """With ``--durations``: the slowest files too (what a worker holds while it runs one:
    the lever of the run's length, and the order :func:`pytest_collection_modifyitems`
    hands them out in)."""
    if config.getoption("durations", None) is None or not _FILE_SECONDS:
        return
    slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", f"slowest 25 files of {len(slowest)} "
                                    f"({sum(_FILE_SECONDS.values()):.0f} s in all)")
    for file, seconds in slowest[:25]:
        terminalreporter.write_line(f"{seconds:8.1f}s {file}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timeout = chaos_timeout(config)
    for item in items:
        if (timeout is not None and "chaos" in item.path.name
                and item.get_closest_marker("timeout") is None):
            item.add_marker(pytest.mark.timeout(timeout))
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    weight: dict[str, tuple[int, float]] = {}
    for item in items:
        file = str(item.path)
        weight[file] = min(weight.get(file, (3, 0.0)), _weight(item))
    # stable: files keep their order within a weight, tests theirs within a file
    items.sort(key=lambda item: weight[str(item.path)])
