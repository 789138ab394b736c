"""A failing chaos run prints its failing history and the blob that replays it within the
test's time limit, however long shrinking would take (``podnet.testing.chaosreport``).

The machine here fails on purpose, and every step sleeps: shrinking its failure to the end
replays about two thousand steps (several minutes), far past the limit the run gets. The
limit is pytest-timeout's thread method, which ends the process with thread stacks only,
as a CI worker's did: whatever is not printed by then is lost.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from podnet.testing.chaosreport import SHRINK_ENV

pytest_plugins = ["pytester"]

MACHINE = '''
import time

import hypothesis.strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from podnet.testing.chaos import chaos_settings


class Overflow(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.total = 0

    @rule(n=st.integers(0, 1000))
    def add(self, n):
        time.sleep(0.1)  # one step of a slow machine
        self.total += n
        assert self.total < 3000, f"the total reached {self.total}"

{decorator}
class Replay(Overflow):
    pass


TestOverflow = {machine}.TestCase
TestOverflow.settings = chaos_settings(50)
'''

#: the run's hard limit (seconds): far above what a bounded run needs (a few steps to the
#: first failure, one second of shrinking), far below what shrinking to the end takes
LIMIT = 60


def _run(tmp_path: Path, name: str, machine: str, decorator: str = "") -> str:
    (tmp_path / name).write_text(MACHINE.replace("{machine}", machine).replace(
        "{decorator}", decorator))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "HYPOTHESIS_", "PODNET_CHAOS"))}
    env[SHRINK_ENV] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
         "-p", "podnet.testing.chaosreport", f"--timeout={LIMIT}",
         "--timeout-method=thread", name],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=LIMIT * 5)
    assert done.returncode != 0, f"the machine's failure went unseen:\n{done.stdout}"
    return done.stdout + done.stderr


def test_the_suite_loads_the_report(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("podnet.testing.chaosreport")


def test_a_failing_history_and_its_blob_are_printed_within_the_limit(tmp_path: Path) -> None:
    out = _run(tmp_path, "test_overflow_chaos.py", "Overflow")
    # the first failure, printed when it failed, before shrinking
    assert "chaos: a failing history, as first found" in out, out
    first = out[out.index("as first found"):]
    assert "state = Overflow()" in first and "state.add(n=" in first, out
    assert "the total reached" in first, out
    # the run ended by the shrinking budget, with the smallest history found so far
    assert f"shrinking stopped after 1 s ({SHRINK_ENV})" in out, out
    blobs = re.findall(r"@reproduce_failure\('[^']+', b'[^']+'\)", out)
    assert blobs, out

    # the printed blob replays the failure
    replay = _run(tmp_path, "test_replay_chaos.py", "Replay", decorator=blobs[-1].replace(
        "@reproduce_failure", "@__import__('hypothesis').reproduce_failure"))
    assert "the total reached" in replay, replay


PROBE = """
def test_probe(request):
    marker = request.node.get_closest_marker("timeout")
    print("chaos file timeout:", marker.args[0] if marker else None)
"""


@pytest.mark.parametrize(("args", "timeout"), [
    ((), "600"), (("-o", "timeout=0"), "None"), (("--timeout=0",), "None"),
    (("--timeout=30",), "600")])
def test_a_deep_run_that_lifts_the_timeout_lifts_the_chaos_files_too(
        pytester: pytest.Pytester, args: tuple[str, ...], timeout: str) -> None:
    """The documented deep run (``PODNET_CHAOS_EXAMPLES=2000 ... -o timeout=0``) once
    still ended at the chaos files' own 600 s."""
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_probe_chaos=PROBE)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*chaos file timeout: {timeout}*"])
