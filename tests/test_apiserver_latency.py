"""The emulator's per-request latency (``--write-latency``, ``--read-latency``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kubernetes import client

from podnet.sim.apiserver import ApiServer


def test_writes_and_reads_wait_their_own_latency() -> None:
    waits: list[float] = []
    with (ApiServer(write_latency=0.25, read_latency=0.125, sleep=waits.append) as server,
          client.ApiClient(client.Configuration(host=server.url)) as api):
        core = client.CoreV1Api(api)
        core.create_node({"metadata": {"name": "n1"}})
        assert waits == [0.25]
        core.read_node("n1")
        assert waits == [0.25, 0.125]
        core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
        core.delete_node("n1")
        assert waits == [0.25, 0.125, 0.25, 0.25]


def test_no_latency_sleeps_never() -> None:
    waits: list[float] = []
    with (ApiServer(sleep=waits.append) as server,
          client.ApiClient(client.Configuration(host=server.url)) as api):
        client.CoreV1Api(api).list_namespace()
    assert waits == []


def test_negative_latency_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        ApiServer(write_latency=-1.0)


@pytest.mark.parametrize("flag", ["--write-latency", "--read-latency"])
@pytest.mark.parametrize("value", ["-0.01", "soon", "nan"])
def test_cli_refuses_a_bad_latency_with_exit_2(flag: str, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "podnet.app.cli", "apiserver", flag, value],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert flag in done.stderr and "Traceback" not in done.stderr
