"""Operator mistakes end in one line naming the cause and exit status 2; an API server
that is down is waited for, said once; every flag says what it is for."""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from podnet.app.cli import build_parser
from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import ApiError
from podnet.core.errors import ConfigError
from podnet.sim.apiserver import ApiServer
from podnet.testing.waiting import wait_for


def podnet(*args: str, env: dict[str, str] | None = None, timeout: float = 60
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podnet.app.cli", *args],
                          capture_output=True, text=True, timeout=timeout, check=False, env=env)


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "podnet.app.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Stderr:
    """A spawned daemon's stderr, read as it comes: a test waits for a line it says
    rather than for a fixed time (a loaded machine starts the interpreter slowly)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self._reader.start()

    def _read(self, stream: Iterator[str]) -> None:
        for line in stream:
            self.lines.append(line)

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def rest(self, proc: subprocess.Popen[str], timeout: float = 30) -> str:
        """Everything, once ``proc`` has ended."""
        proc.wait(timeout=timeout)
        self._reader.join(timeout=timeout)
        return "".join(self.lines)


#: the daemons' retry period while the API server is down ("retrying every 2 s"), and a
#: margin: a line repeated per attempt shows within it
RETRY_PERIOD_AND_MORE = 2.5


def one_line(run: subprocess.CompletedProcess[str]) -> str:
    """The one line a mistake ends in. A daemon's INFO log records (JSON lines, what it
    did before it met the mistake) may come before it; none of them is an error."""
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    lines, records = [], []
    for line in run.stderr.strip().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and "level" in record:
            records.append(record)
        else:
            lines.append(line)
    assert len(lines) == 1, run.stderr[-2000:]
    assert all(r["level"] in ("info", "warning") for r in records), run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    return lines[0]


def free_port() -> int:
    """A port nothing listens on (picked by the kernel, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {}}],
    }))
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Path]:
    """A running API emulator; its kubeconfig."""
    with ApiServer() as server:
        path = tmp_path / "kubeconfig"
        server.write_kubeconfig(path)
        yield path


# --- help ---------------------------------------------------------------------------------


def _flags_without_help(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _flags_without_help(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_every_flag_of_every_subcommand_has_help_text() -> None:
    assert list(_flags_without_help(build_parser(), "podnet")) == []


def test_the_walk_finds_a_flag_without_help() -> None:
    parser = build_parser()
    parser.add_argument("--undocumented")
    assert list(_flags_without_help(parser, "podnet")) == ["podnet --undocumented"]


# --- podnet run -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, needle", [
    ("clusters: [\n", "not YAML"),
    ("just words\n", "not a mapping"),
])
def test_a_garbage_kubeconfig(tmp_path: Path, text: str, needle: str) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    line = one_line(podnet("run", "--kubeconfig", str(bad), "--listen", "127.0.0.1:0"))
    assert str(bad) in line and needle in line


def test_a_missing_kubeconfig(tmp_path: Path) -> None:
    line = one_line(podnet("run", "--kubeconfig", str(tmp_path / "nope")))
    assert "no such file" in line


def test_an_api_server_host_that_does_not_resolve(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kc", "https://no-such-host.invalid:6443")
    line = one_line(podnet("run", "--kubeconfig", str(config), "--listen", "127.0.0.1:0",
                           "--no-leader-elect"))
    assert "cannot resolve the host 'no-such-host.invalid'" in line


@contextlib.contextmanager
def answering(code: int, body: bytes = b"") -> Iterator[str]:
    """An HTTP server on loopback that answers every GET with ``code``; its URL."""
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_address_that_is_no_api_server(tmp_path: Path) -> None:
    """A wrong address whose port answers, but not as Kubernetes: no retry mends it."""
    with answering(501) as url:
        config = kubeconfig(tmp_path / "kc", url)
        line = one_line(podnet("run", "--kubeconfig", str(config), "--listen", "127.0.0.1:0"))
    assert line == (f"podnet run: config kubeconfig: API server {url}: not a Kubernetes API "
                    "server (GET /version: HTTP 501)")


@pytest.mark.parametrize("code, body, needle", [
    (404, b"", "not a Kubernetes API server (GET /version: HTTP 404)"),
    (200, b"{}", "is not a Kubernetes API server (/version has no gitVersion)"),
    (401, b"", "credentials refused (HTTP 401)"),
    (403, b"", "credentials refused (HTTP 403)"),
])
def test_the_probe_tells_a_mistake_from_a_server_that_is_down(
    tmp_path: Path, code: int, body: bytes, needle: str
) -> None:
    """What `podnet run` and `podnet node` probe first (in one process: the command's
    line is the test above's)."""
    with answering(code, body) as url:
        cluster = KubeCluster.connect(str(kubeconfig(tmp_path / "kc", url)))
        with pytest.raises(ConfigError, match=re.escape(needle)):
            cluster.probe()
    for down in (500, 503, 429):  # a server starting or shedding load: retried
        with answering(down) as url:
            cluster = KubeCluster.connect(str(kubeconfig(tmp_path / "kc", url)))
            with pytest.raises(ApiError) as raised:
                cluster.probe()
            assert not isinstance(raised.value, ConfigError)


def test_a_busy_listen_port(api: Path, busy_port: int) -> None:
    line = one_line(podnet("run", "--kubeconfig", str(api), "--no-leader-elect",
                           "--listen", f"127.0.0.1:{busy_port}"))
    assert line == f"podnet run: --listen 127.0.0.1:{busy_port}: Address already in use"


# --- start-up: the config and the flags over it -------------------------------------------


@pytest.mark.parametrize("text", ["", "\n\n", "# all commented out\n# workers: 4\n"])
@pytest.mark.parametrize("command", ["run", "node", "audit"])
def test_an_empty_config_file_is_refused(api: Path, tmp_path: Path, text: str,
                                         command: str) -> None:
    """An empty file is a mount gone wrong (a ConfigMap key the volume lacks), never a
    wish for every default: before anything starts, one line naming the file."""
    config = tmp_path / "config.yaml"
    config.write_text(text)
    extra = {"run": ["--no-leader-elect", "--listen", "127.0.0.1:0"], "node": ["--node", "n1"],
             "audit": []}[command]
    line = one_line(podnet(command, "--kubeconfig", str(api), "--config", str(config),
                           "--provider", "reference", *extra))
    assert f"podnet {command}:" in line and str(config) in line and "is empty" in line


def test_an_explicit_empty_mapping_means_every_default(tmp_path: Path) -> None:
    from podnet.core.config import Config, load_config

    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    assert load_config(config) == Config()


@pytest.mark.parametrize(("flags", "needle"), [
    (["--workers", "0"], "--workers: expected a whole number from 1 to 256, got 0"),
    (["--workers", "257"], "--workers: expected a whole number from 1 to 256, got 257"),
    (["--listen", "nowhere"], "--listen: expected HOST:PORT, got 'nowhere'"),
    (["--listen", "127.0.0.1:99999"], "--listen: bad port in '127.0.0.1:99999'"),
])
def test_a_flag_over_the_config_is_checked_as_the_config_is(
        api: Path, flags: list[str], needle: str) -> None:
    """``--workers 0`` is refused, not read as "the config's value"; a flag is held to
    the config key's rule."""
    line = one_line(podnet("run", "--kubeconfig", str(api), "--no-leader-elect",
                           "--provider", "reference", *flags))
    assert line.startswith("podnet run:") and needle in line


@pytest.mark.parametrize("leader_elect", [False, True])
def test_an_api_server_that_is_down_is_waited_for_and_said_once(
    tmp_path: Path, leader_elect: bool
) -> None:
    """As controller-runtime does: a server briefly down is retried, not a reason to exit.
    One line says what is retried (no urllib3 warning per attempt), one that it answers;
    then the controller serves (leads, its caches synced: /readyz says ok)."""
    port, listen = free_port(), free_port()
    config = kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    args = ["-v", "run", "--kubeconfig", str(config), "--listen", f"127.0.0.1:{listen}",
            "--log-format", "text", "--provider", "reference"]
    proc = spawn(*args, *([] if leader_elect else ["--no-leader-elect"]))
    stderr = Stderr(proc)
    err = ""
    try:
        wait_for("the controller to say the API server does not answer",
                 lambda: stderr.said("does not answer") or proc.poll() is not None)
        time.sleep(RETRY_PERIOD_AND_MORE)  # another attempt and more: still one line
        assert proc.poll() is None, "".join(stderr.lines)
        not_ready: list[tuple[int, bytes]] = []

        def readyz_refuses() -> bool:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{listen}/readyz", timeout=5)
            except urllib.error.HTTPError as refused:
                not_ready.append((refused.code, refused.read()))
                return True
            except OSError:  # the listener is not up yet
                return False
            pytest.fail("/readyz answered ok while the API server is down")

        wait_for("/readyz to answer", readyz_refuses, timeout=30)
        code, body = not_ready[-1]
        assert code == 503 and b"does not answer" in body
        with ApiServer(port=port):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{listen}/readyz",
                                                timeout=2) as answer:
                        if answer.status == 200 and b"ok" in answer.read():
                            break
                except OSError:
                    pass
                time.sleep(0.3)
            else:
                pytest.fail("the controller never became ready once the API server answered")
            if leader_elect:
                time.sleep(1)  # the Lease is taken a retry period after the first answer
            proc.send_signal(signal.SIGTERM)
            err = stderr.rest(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "urllib3" not in err and "Retrying" not in err
    assert "Traceback" not in err
    waits = [line for line in err.splitlines() if "does not answer" in line]
    assert len(waits) == 1, err[-3000:]
    assert f"http://127.0.0.1:{port}" in waits[0] and "connection refused" in waits[0]
    assert "retrying every 2 s" in waits[0]
    assert sum("answers again" in line for line in err.splitlines()) == 1, err[-3000:]


# --- podnet node ------------------------------------------------------------------------


def test_node_with_a_socket_directory_it_cannot_make(api: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line(podnet("node", "--node", "n1", "--kubeconfig", str(api),
                           "--provider", "reference", "--socket", str(blocker / "agent.sock"),
                           "--health-listen", "127.0.0.1:0"))
    assert line.startswith("podnet node: ") and str(blocker) in line
    assert "Not a directory" in line


def test_node_with_a_garbage_kubeconfig(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("{{{")
    line = one_line(podnet("node", "--node", "n1", "--kubeconfig", str(bad)))
    assert "not a kubeconfig" in line


def test_node_waits_for_an_api_server_that_is_down(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{free_port()}")
    proc = spawn("node", "--node", "n1", "--kubeconfig", str(config),
                 "--provider", "reference", "--socket", str(tmp_path / "s" / "agent.sock"),
                 "--health-listen", "127.0.0.1:0")
    stderr = Stderr(proc)
    try:
        wait_for("the agent to say the API server does not answer",
                 lambda: stderr.said("does not answer") or proc.poll() is not None)
        time.sleep(RETRY_PERIOD_AND_MORE)  # another attempt and more: still one line
        assert proc.poll() is None, "".join(stderr.lines)
        proc.send_signal(signal.SIGTERM)
        err = stderr.rest(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "does not answer (connection refused)" in lines[0], err


# --- podnet apiserver, podnet demo ---------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_apiserver_with_a_port_out_of_range(port: str) -> None:
    assert "--port" in one_line(podnet("apiserver", "--port", port))


def test_apiserver_on_a_busy_port(busy_port: int) -> None:
    line = one_line(podnet("apiserver", "--port", str(busy_port)))
    assert line == f"podnet apiserver: 127.0.0.1:{busy_port}: Address already in use"


def test_demo_of_ovn_without_ovsdb_server() -> None:
    """ovsdb-server out of reach (PATH holds only the interpreter's folder)."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    env.pop("PODNET_OVN_NB_SCHEMA", None)
    line = one_line(podnet("demo", "--provider", "ovn", "--nodes", "1", "--pods", "1",
                           "--no-node-stage", env=env))
    assert line.startswith("podnet demo: --provider ovn: ovsdb-server is not installed")
    assert "ovn-central" in line


# --- output: JSON for every view; a reader that goes away ----------------------------------


def test_every_command_that_prints_a_table_has_json_output() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("status", "audit", "plugins"):
        [output] = [a for a in sub.choices[command]._actions if "--output" in a.option_strings]
        assert output.choices == ["table", "json"], command


def test_plugins_as_json() -> None:
    run = podnet("plugins", "-o", "json")
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    by_name = {p["name"]: p for p in listed["plugins"]}
    assert "reference" in by_name and "podnet_allocate" in by_name["reference"]["hooks"]
    assert all(set(p) == {"name", "version", "source", "hooks"} for p in listed["plugins"])


def test_a_reader_that_stops_reading_is_no_traceback() -> None:
    """``podnet plugins | head -1``: the pipe closes under the command, which ends with
    the status a shell gives a command ended by SIGPIPE, and says nothing."""
    proc = subprocess.Popen([sys.executable, "-m", "podnet.app.cli", "plugins", "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before it writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""
