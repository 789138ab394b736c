"""A driver that runs ``podnet-cni`` exactly as a container runtime does.

``run_cni(command, config, env)`` starts the plugin as a new process with the ``CNI_*``
environment and the network configuration on stdin, and returns its exit status and stdout
(parsed when it is JSON) as a ``CniResult``. By default it runs the plugin's single file
(``podnet/cni/plugin.py``) with this interpreter, as a host runs the installed copy; pass
``argv`` to run another form (the ``podnet-cni`` console script, ``python -m podnet.cni``).

The node agent's tests use it too: point ``agentSocket`` in the config at the agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

#: the plugin's one file, as a DaemonSet installs it onto a host
PLUGIN_FILE = Path(__file__).resolve().parent.parent / "cni" / "plugin.py"


def plugin_argv() -> list[str]:
    """The command line of the plugin's single file under this interpreter."""
    return [sys.executable, str(PLUGIN_FILE)]


@attrs.frozen
class CniResult:
    """What the runtime sees of one invocation."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> Any:
        """stdout as JSON (None when it is empty)."""
        return json.loads(self.stdout) if self.stdout.strip() else None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def error_code(self) -> int | None:
        """The CNI error code of a failed invocation (None when it succeeded)."""
        if self.ok:
            return None
        out = self.output
        return int(out["code"]) if isinstance(out, dict) and "code" in out else None

    def check_error(self, code: int, *names: str) -> dict[str, Any]:
        """Assert this is the spec's error object with ``code`` whose message names each of
        ``names``; return it."""
        assert self.exit_code == 1, f"expected exit status 1, got {self.exit_code}: {self}"
        out = self.output
        assert isinstance(out, dict), f"the error is not a JSON object: {self.stdout!r}"
        assert set(out) <= {"cniVersion", "code", "msg", "details"}, out
        assert isinstance(out.get("cniVersion"), str), out
        assert out["code"] == code, f"expected code {code}: {out}"
        for name in names:
            assert name in out["msg"], f"the message does not name {name!r}: {out}"
        return out


def run_cni(command: str, config: Mapping[str, Any] | str | bytes | None,
            env: Mapping[str, str] | None = None, *, argv: Sequence[str] | None = None,
            timeout: float = 90.0) -> CniResult:
    """Run the plugin with ``CNI_COMMAND=command``, ``env`` (the other ``CNI_*``
    variables; a value of None removes a default) and ``config`` on stdin (an object is
    encoded as JSON; a string or bytes is sent as it is, for malformed input).

    Defaults, as a runtime sets them: ``CNI_PATH`` and, for ADD, DEL and CHECK,
    ``CNI_IFNAME=eth0``; nothing else of the caller's environment but ``PATH``."""
    full: dict[str, str | None] = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                   "CNI_COMMAND": command, "CNI_PATH": "/opt/cni/bin"}
    if command in ("ADD", "DEL", "CHECK"):
        full["CNI_IFNAME"] = "eth0"
    full.update(env or {})
    clean = {k: v for k, v in full.items() if v is not None}
    if config is None:
        data = b""
    elif isinstance(config, bytes):
        data = config
    elif isinstance(config, str):
        data = config.encode("utf-8")
    else:
        data = json.dumps(config).encode("utf-8")
    done = subprocess.run(list(argv or plugin_argv()), input=data, env=clean,
                          capture_output=True, timeout=timeout, check=False)
    return CniResult(done.returncode, done.stdout.decode("utf-8", "replace"),
                     done.stderr.decode("utf-8", "replace"))


def pod_args(namespace: str = "default", name: str = "pod-a", uid: str | None = "uid-a",
             infra: str | None = None) -> str:
    """A ``CNI_ARGS`` value as the kubelet's runtimes send it."""
    pairs = ["IgnoreUnknown=1", f"K8S_POD_NAMESPACE={namespace}", f"K8S_POD_NAME={name}"]
    if infra:
        pairs.append(f"K8S_POD_INFRA_CONTAINER_ID={infra}")
    if uid:
        pairs.append(f"K8S_POD_UID={uid}")
    return ";".join(pairs)


def add_as_a_runtime(config: Mapping[str, Any], env: Mapping[str, str], tries: int = 60,
                     pause: float = 0.5) -> tuple[CniResult, list[int | None]]:
    """ADD as a container runtime does: after error 11 (try again later), the same ADD
    again (same container id), ``tries`` times at most, ``pause`` seconds apart.

    :return: the last result, and the error codes of the attempts before it."""
    seen: list[int | None] = []
    done = run_cni("ADD", config, env)
    for _ in range(tries - 1):
        if done.ok or done.error_code != 11:
            break
        seen.append(done.error_code)
        time.sleep(pause)
        done = run_cni("ADD", config, env)
    return done, seen
