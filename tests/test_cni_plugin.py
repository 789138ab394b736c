"""``podnet-cni``, the static executable, run as a container runtime runs it
(``podnet.testing.cni.run_cni``: a new process, the ``CNI_*`` environment, the config on
stdin): what the program itself does. It answers VERSION, carries every other command to
the agent (``POST /v1/cni/exec``, docs/node.md) and prints the answer with its exit code,
and says the specification's error when the agent cannot be reached.

The agent here is ``ExecStandIn``: a small server on a unix socket speaking that wire
format and holding no CNI rule; or raw servers answering bytes a test chooses. The CNI
rules (configuration, versions, CNI_ARGS, results, prevResult...) are the agent's:
tests/test_cni_exec.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podnet.testing.cni import (
    IPAM_NAME,
    PLUGIN_NAME,
    CniResult,
    ExecStandIn,
    plugin_path,
    pod_args,
    read_exec_request,
    run_cni,
)

ROOT = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
VERSIONS = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]
CONTAINER = "c0ffee01"
RESULT = b'{"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.5/24"}]}\n'


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # short: a unix socket's path is limited to 107 bytes, pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="pncni"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def agent(sockdir: Path) -> Iterator[ExecStandIn]:
    with ExecStandIn(str(sockdir / "agent.sock")) as stand_in:
        yield stand_in


@pytest.fixture
def netns(sockdir: Path) -> Path:
    """Stands for a network namespace's path: the plugin only looks whether it exists."""
    path = sockdir / "netns-a"
    path.touch()
    return path


def conf(socket_path: str, version: str = "1.1.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "podnet", "type": "podnet-cni",
            "agentSocket": socket_path, **extra}


def env(netns: Path | str | None, container: str = CONTAINER, **extra: str | None
        ) -> dict[str, str | None]:
    return {"CNI_CONTAINERID": container, "CNI_NETNS": None if netns is None else str(netns),
            "CNI_ARGS": pod_args(), **extra}


# --- VERSION ---------------------------------------------------------------------------


def test_version_is_answered_by_the_plugin_alone(sockdir: Path) -> None:
    want = {"cniVersion": "1.1.0", "supportedVersions": VERSIONS}
    for ipam in (False, True):
        result = run_cni("VERSION", {"cniVersion": "1.1.0"}, ipam=ipam)
        assert (result.exit_code, result.output) == (0, want)
    # it reads nothing: no configuration, a broken one, no agent anywhere
    for stdin in (None, "{", b"\xff"):
        result = run_cni("VERSION", stdin)
        assert (result.exit_code, result.output, result.stderr) == (0, want, "")


# --- the request ---------------------------------------------------------------------


def test_the_request_carries_the_command_as_it_came(
        agent: ExecStandIn, netns: Path) -> None:
    # stdin byte for byte: its spacing, key order and escapes are the agent's to read
    stdin = (b'{ "cniVersion" : "1.0.0",\n "name": "podnet", "type": "podnet-cni",\t'
             b'"agentSocket": "' + agent.path.encode() + b'", "x": "caf\\u00e9" }  \n')
    agent.respond = lambda request: (0, RESULT)
    result = run_cni("ADD", stdin, {**env(netns), "NOT_CNI": "1", "XCNI_A": "2"})
    assert (result.exit_code, result.stdout) == (0, RESULT.decode())
    (request,) = agent.requests
    assert (request.method, request.target) == ("POST", "/v1/cni/exec")
    assert request.body == stdin
    assert request.header("Host") == "podnet-agent"
    assert request.header("User-Agent") == f"podnet-cni/{VERSION}"
    assert request.header("Connection") == "close"
    assert request.header("Content-Type") == "application/json"
    assert request.header("Content-Length") == str(len(stdin))
    assert request.program == "podnet-cni"
    # every CNI_* variable, one header each; nothing else of the environment
    assert request.environ == {"CNI_COMMAND": "ADD", "CNI_PATH": "/opt/cni/bin",
                               "CNI_IFNAME": "eth0", "CNI_CONTAINERID": CONTAINER,
                               "CNI_NETNS": str(netns), "CNI_ARGS": pod_args()}
    assert len(request.env) == 6


def test_odd_values_are_percent_encoded(agent: ExecStandIn, netns: Path) -> None:
    odd = "a b%c=d\te\u00e9;K=\"v\""
    result = run_cni("DEL", conf(agent.path), {**env(netns), "CNI_ARGS": odd,
                                               "CNI_EMPTY": "", "CNI_IFNAME": None})
    assert result.ok, result
    (request,) = agent.requests
    raw = [v for k, v in request.headers if k == "CNI-Env"]
    # every byte outside 0x21..0x7E and '%' as %XX, upper-case hex; '=' and '"' as they are
    assert "CNI_ARGS=a%20b%25c=d%09e%C3%A9;K=\"v\"" in raw
    assert "CNI_EMPTY=" in raw  # set to "": a header with nothing after '='
    assert not any(v.startswith("CNI_IFNAME=") for v in raw)  # absent: no header
    assert request.environ["CNI_ARGS"] == odd
    assert all(0x21 <= ord(c) <= 0x7E for v in raw for c in v)


def test_bytes_that_are_no_utf8_survive(agent: ExecStandIn, netns: Path) -> None:
    """The environment is bytes: the agent reads back exactly what the runtime set."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": "CHECK"}
    environ = {k.encode(): v.encode() for k, v in base.items()}
    environ[b"CNI_ODD"] = b"\xff\x00"[:1] + b"\x01 %"
    done = subprocess.run([str(plugin_path())], input=json.dumps(conf(agent.path)).encode(),
                          env=environ, capture_output=True, check=False)
    assert done.returncode == 0, done.stdout
    (request,) = agent.requests
    assert "CNI_ODD=%FF%01%20%25" in [v for k, v in request.headers if k == "CNI-Env"]
    assert request.environ["CNI_ODD"].encode("utf-8", "surrogateescape") == b"\xff\x01 %"


def test_the_answer_is_printed_with_its_exit_code(agent: ExecStandIn, netns: Path) -> None:
    error = b'{"cniVersion": "1.0.0", "code": 7, "msg": "name: missing"}\n'
    for code, body in ((1, error), (0, b""), (3, b"not json at all \xce\xbb"), (0, RESULT)):
        agent.respond = lambda request, code=code, body=body: (code, body)
        done = subprocess.run([str(plugin_path())], input=json.dumps(conf(agent.path)).encode(),
                              env={"CNI_COMMAND": "ADD"}, capture_output=True, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (code, body, b"")


def test_a_large_configuration_goes_whole(agent: ExecStandIn, netns: Path) -> None:
    big = conf(agent.path, padding="x" * (3 << 20))
    assert run_cni("ADD", big, env(netns)).ok
    assert json.loads(agent.requests[0].body) == big


def test_a_configuration_over_the_bound_is_refused_here(agent: ExecStandIn) -> None:
    run_cni("ADD", conf(agent.path, "0.4.0", padding="x" * (5 << 20))).check_error(
        6, "larger than")
    assert agent.requests == []


# --- which agent: the role, the configuration's fields -------------------------------


def test_the_role_comes_from_the_name_else_the_config(sockdir: Path) -> None:
    with ExecStandIn(str(sockdir / "top.sock")) as top, \
         ExecStandIn(str(sockdir / "ipam.sock")) as ipam_agent:
        bridge = {"cniVersion": "1.0.0", "name": "n", "type": "bridge",
                  "agentSocket": top.path,
                  "ipam": {"type": IPAM_NAME, "agentSocket": ipam_agent.path}}
        podnet = {**bridge, "type": PLUGIN_NAME}
        other = sockdir / "bin" / "some-copy"
        other.parent.mkdir()
        shutil.copy(plugin_path(), other)
        cases = [
            # the two installed names decide, whatever the configuration says
            (PLUGIN_NAME, bridge, top), (IPAM_NAME, podnet, ipam_agent),
            # any other name: a type other than podnet-cni with an ipam object is IPAM
            (str(other), bridge, ipam_agent), (str(other), podnet, top),
            (str(other), {**bridge, "ipam": "podnet-ipam"}, top),
            (str(other), {**bridge, "type": 5}, top),
        ]
        for program, config, which in cases:
            argv = [program if "/" in program else str(plugin_path(program))]
            assert run_cni("STATUS", config, argv=argv).ok, (program, config)
            asked = which.requests.pop()
            assert asked.program == Path(program).name
            assert json.loads(asked.body) == config
            assert top.requests == ipam_agent.requests == []


def test_the_ipam_role_reads_its_sections_timeout(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(path)
        silent.listen(1)
        config = {"cniVersion": "1.0.0", "name": "n", "type": "bridge", "agentTimeout": 999,
                  "ipam": {"agentSocket": path, "agentTimeout": 0.3}}
        run_cni("ADD", config, env(netns), ipam=True).check_error(
            11, path, "no answer within 0.3 s")


def test_the_scanner_reads_json_as_json(sockdir: Path, netns: Path) -> None:
    """The few keys are found as a JSON reader finds them: escapes decoded, the last of a
    key given twice, nested keys of the same name not taken for them."""
    with ExecStandIn(str(sockdir / "ag\u00e9nt\U0001f600.sock")) as agent:
        escaped = json.dumps(agent.path, ensure_ascii=True).replace("/", "\\/")
        decoy = str(sockdir / "decoy.sock")
        stdin = ('{"cniVersion": "1.0.0", "agentSocket": "DECOY", "agentTimeout": 1e1,'
                 ' "runtimeConfig": {"agentSocket": "DECOY", "x": [1, {"agentSocket": 2}]},'
                 ' "ipam": {"agentSocket": "DECOY"}, "z": [null, true, false, -0.5E-3, "\\""]'
                 ', "agentSocket": REAL}').replace("DECOY", decoy).replace("REAL", escaped)
        assert run_cni("ADD", stdin, env(netns)).ok
        assert agent.requests[0].body == stdin.encode()
        # a number the agent's reader takes (Python's json: NaN, Infinity) is still JSON
        stdin = '{"agentSocket": REAL, "agentTimeout": Infinity, "n": NaN}'.replace(
            "REAL", escaped)
        assert run_cni("ADD", stdin, env(netns)).ok
        assert len(agent.requests) == 2


#: a directory that does not exist: every socket in it is unreachable (ENOENT), so the
#: message names the socket the plugin chose, and no agent anywhere is asked
NOWHERE = f"/nonexistent-{uuid.uuid4().hex}"
_scalars = (st.none() | st.booleans() | st.integers(-10**20, 10**20)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.sampled_from(["agentSocket", "type", "x", "ipam",
                                                          "cniVersion", "\u00e9"]),
                                         inner, max_size=3), max_leaves=8)
_keys = st.sampled_from(["agentSocket", "agentTimeout", "cniVersion", "type", "ipam", "name",
                         "agentSocke", "agentSocket\u0000", "x"])
_sockets = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                   min_size=1, max_size=10).map(lambda tail: f"{NOWHERE}/{tail}")
_versions = st.sampled_from([*VERSIONS, "1.2.0", "", "1.0.0 "]) | st.text(max_size=3)


def _document(members: list[tuple[str, Any]], ascii_only: bool, spaces: str) -> str:
    """A JSON object written member by member: keys may repeat, as JSON allows."""
    parts = [f"{json.dumps(k, ensure_ascii=ascii_only)}{spaces}:{spaces}"
             f"{json.dumps(v, ensure_ascii=ascii_only)}" for k, v in members]
    return "{" + spaces + ("," + spaces).join(parts) + spaces + "}"


@settings(max_examples=int(os.environ.get("PODNET_CHAOS_EXAMPLES", "100")), deadline=None)
@given(members=st.lists(st.tuples(_keys, _values | _sockets | _versions), max_size=8),
       socket_path=_sockets, version=_versions, ascii_only=st.booleans(),
       spaces=st.sampled_from(["", " ", "\n\t ", "\r\n"]))
def test_the_scanner_reads_what_the_agents_json_reads(
        members: list[tuple[str, Any]], socket_path: str, version: str, ascii_only: bool,
        spaces: str) -> None:
    """Whatever the document (nesting, repeated keys, escapes, raw UTF-8, near-miss keys),
    the socket and the cniVersion the plugin takes are those Python's json reads."""
    members = [("cniVersion", version), *members]
    # the socket read last is always one in NOWHERE: neither the default nor a path that
    # might exist is ever asked
    read = json.loads(_document(members, True, "")).get("agentSocket")
    if not (isinstance(read, str) and read.startswith(NOWHERE)):
        members.append(("agentSocket", socket_path))
    text = _document(members, ascii_only, spaces)
    config = json.loads(text)
    chosen = config["agentSocket"]
    done = subprocess.run([str(plugin_path())], input=text.encode(), capture_output=True,
                          env={"CNI_COMMAND": "ADD"}, timeout=30, check=False)
    out = json.loads(done.stdout)
    assert done.returncode == 1
    want = config["cniVersion"] if config.get("cniVersion") in VERSIONS else "1.1.0"
    assert out == {"cniVersion": want, "code": 11,
                   "msg": f"podnet node agent not reachable at {chosen}: No such file or "
                          "directory"}, text


# --- the agent unreachable -------------------------------------------------------------


@pytest.mark.parametrize(("command", "code"), [("ADD", 11), ("CHECK", 11), ("GC", 11),
                                               ("STATUS", 50), ("FROB", 11), ("", 11)])
def test_an_agent_not_there_is_the_specs_error(
        sockdir: Path, netns: Path, command: str, code: int) -> None:
    down = str(sockdir / "nobody.sock")
    out = run_cni(command, conf(down, "0.4.0"), env(netns)).check_error(
        code, down, "not reachable", "No such file or directory")
    assert out["cniVersion"] == "0.4.0"
    # a version the plugin does not know (the agent would say so): its own, 1.1.0
    out = run_cni(command, conf(down, "9.9.9"), env(netns)).check_error(code, down)
    assert out["cniVersion"] == "1.1.0"
    # a socket that is no listener
    (sockdir / "plain").write_text("")
    run_cni(command, conf(str(sockdir / "plain")), env(netns)).check_error(
        code, "Connection refused")


def test_the_message_is_json_whatever_the_path(sockdir: Path, netns: Path) -> None:
    down = str(sockdir / 'no"bo\\dy\u00e9\x01.sock')
    out = run_cni("ADD", conf(down), env(netns)).check_error(11, down)
    assert out["msg"].startswith(f"podnet node agent not reachable at {down}: ")
    run_cni("ADD", conf("/x/" + "y" * 120), env(netns)).check_error(11, "longer than 107")
    run_cni("ADD", conf("/x\u0000y"), env(netns)).check_error(11, "NUL")


def test_del_with_the_agent_down(sockdir: Path, netns: Path) -> None:
    down = str(sockdir / "nobody.sock")
    # the namespace is gone, or was never given: nothing is left in it; the runtime goes on
    (sockdir / "file").write_text("")
    for gone in (sockdir / "netns-gone", sockdir / "file" / "below", None, ""):
        result = run_cni("DEL", conf(down), env(gone))
        assert (result.exit_code, result.stdout) == (0, ""), gone
    # the namespace is still there: the runtime must try again
    run_cni("DEL", conf(down), env(netns)).check_error(11, down, "not reachable")


def test_the_ipam_role_with_the_agent_down(sockdir: Path, netns: Path) -> None:
    down = str(sockdir / "nobody.sock")
    config = {"cniVersion": "1.1.0", "name": "n", "type": "bridge",
              "ipam": {"type": IPAM_NAME, "agentSocket": down}}
    # DEL and GC hold nothing of the IPAM role's on the host: they succeed
    for command in ("DEL", "GC"):
        result = run_cni(command, config, env(netns), ipam=True)
        assert (result.exit_code, result.stdout) == (0, ""), command
    run_cni("ADD", config, env(netns), ipam=True).check_error(11, down)
    run_cni("STATUS", config, ipam=True).check_error(50, down)
    # as podnet-cni GC is asked of the agent, and is error 11 without it
    run_cni("GC", {**config, "agentSocket": down}).check_error(11, down)


def test_an_agent_that_does_not_answer(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(path)
        silent.listen(1)
        run_cni("ADD", conf(path, agentTimeout=0.3), env(netns)).check_error(
            11, path, "no answer within 0.3 s")
        silent.accept()[0].close()  # that plugin's connection, left in the backlog
        # a timeout that is no positive number: the default (60 s; the agent, reached,
        # says what is wrong with the field), not a give-up at once
        for bad in (0, -1, "3", True, None):
            proc = subprocess.Popen([str(plugin_path())], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env={"CNI_COMMAND": "ADD"})
            try:
                out, _ = proc.communicate(json.dumps(conf(path, agentTimeout=bad)).encode(),
                                          timeout=0.01)
            except subprocess.TimeoutExpired:
                pass
            conn, _ = silent.accept()
            with conn:
                read_exec_request(conn.makefile("rb"))
                threading.Event().wait(0.2)  # an answer that takes its time
                conn.sendall(b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: 0\r\nContent-Length: 2"
                             b"\r\n\r\n{}")
            out, _ = proc.communicate(timeout=60)
            assert (proc.returncode, out) == (0, b"{}"), bad


# --- the answer's framing ----------------------------------------------------------------


def _raw_peer(path: str, answer: bytes, keep: bool = True) -> threading.Thread:
    """A server that reads one request, writes ``answer`` and then keeps the connection
    open (the plugin must end its read by the answer's framing) or closes it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn.makefile("rb") as stream:
            request = read_exec_request(stream)
            assert request.target == "/v1/cni/exec"
        conn.sendall(answer)
        if keep:
            threading.Event().wait(5)  # hold the connection open past the plugin's exit
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_chunked_answer_on_a_kept_connection(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "chunked.sock")
    chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(part), part)
                      for part in (RESULT[:10], RESULT[10:]))
    _raw_peer(path, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCNI-Exit-Code: 0\r\n"
              b"\r\n" + chunks + b"0\r\n\r\n")
    result = run_cni("ADD", conf(path, agentTimeout=3), env(netns))
    assert (result.exit_code, result.stdout) == (0, RESULT.decode())


def test_a_sized_answer_on_a_kept_connection(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "sized.sock")
    body = b'{"code": 11, "msg": "agent: busy"}'
    _raw_peer(path, b"HTTP/1.1 200 OK\r\ncni-exit-code:1\r\ncontent-length:  %d\r\n\r\n%s"
              % (len(body), body))
    result = run_cni("ADD", conf(path, agentTimeout=3), env(netns))
    assert (result.exit_code, result.stdout) == (1, body.decode())


def test_an_answer_to_its_end(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "eof.sock")
    _raw_peer(path, b"HTTP/1.0 200 OK\nCNI-Exit-Code: 0\n\n" + RESULT, keep=False)
    result = run_cni("ADD", conf(path, agentTimeout=3), env(netns))
    assert (result.exit_code, result.stdout) == (0, RESULT.decode())


@pytest.mark.parametrize(("answer", "keep", "why"), [
    (b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: 0\r\nContent-Length: lots\r\n\r\n{}", True,
     "malformed HTTP answer: Content-Length lots"),
    (b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: 0\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", True,
     "malformed HTTP answer: chunk size zz"),
    (b"SSH-2.0-nope\r\n\r\n", True, "not an HTTP answer: SSH-2.0-nope"),
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", True,
     "answered HTTP 404 without CNI-Exit-Code"),
    (b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}', True,
     "answered HTTP 200 without CNI-Exit-Code"),
    (b"HTTP/1.1 500 Internal Server Error\r\nCNI-Exit-Code: 0\r\n\r\n", False,
     "answered HTTP 500 without CNI-Exit-Code"),
    (b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: one\r\nContent-Length: 0\r\n\r\n", True,
     "invalid CNI-Exit-Code: one"),
    (b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: 256\r\nContent-Length: 0\r\n\r\n", True,
     "invalid CNI-Exit-Code: 256"),
    (b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: 0\r\nContent-Length: 100\r\n\r\n{}", False,
     "the answer ended early"),
    (b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: 0\r\n", False, "the answer ended early"),
    (b"", False, "closed the connection without answering"),
])
def test_an_answer_that_is_none(sockdir: Path, netns: Path, answer: bytes, keep: bool,
                                why: str) -> None:
    """Whatever is no exec answer is an agent not reached: error 11 saying what came."""
    path = str(sockdir / "bad.sock")
    _raw_peer(path, answer, keep)
    run_cni("ADD", conf(path, agentTimeout=3), env(netns)).check_error(11, path, why)


# --- the test kit ----------------------------------------------------------------------


def test_the_driver_reports_what_the_runtime_sees() -> None:
    result = CniResult(1, '{"cniVersion": "1.1.0", "code": 7, "msg": "name: missing"}\n', "")
    assert result.error_code == 7 and not result.ok
    assert result.check_error(7, "name")["msg"] == "name: missing"

