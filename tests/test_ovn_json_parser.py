"""The OVN provider's OVSDB library parses with Open vSwitch's C JSON parser.

pip's ``ovs`` installs without its extension (it builds only against Open vSwitch's
development files); ``make`` gives the venv Debian's build of it
(``scripts/ovs-json-parser.sh``). Without it every message from the Northbound server goes
through a lexer in pure Python, most of the provider's CPU in a burst of ports (goal P6).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "ovs-json-parser.sh"

#: what an OVSDB server sends, and the corners of JSON a parser gets wrong
SAMPLES = [
    '{"id":null,"method":"update3","params":[["monid","OVN_Northbound"],'
    '"00000000-0000-0000-0000-000000000000",{"Logical_Switch_Port":{'
    '"6f1c9c4e-0d2b-4f57-9a43-5a2a6f8e1b11":{"insert":{"name":"default/pod-1",'
    '"addresses":["0a:00:00:00:00:01 10.0.0.5"],"external_ids":["map",'
    '[["podnet.io/key","pod-1.default.0001"]]]}}}}]}',
    '[1, -2, 3.5, 1e3, -0.25, 9007199254740993, true, false, null, "", {}, []]',
    '"\\u00e9\\u4e2d\\ud83d\\ude00 \\"quoted\\" \\\\ \\/ \\b\\f\\n\\r\\t"',
    '{"a": {"b": {"c": [[[["deep"]]]]}}}',
]
BAD = ['[1,', '{"a" 1}', '"unterminated', '[1] 2', 'nul']


def test_ovs_parses_json_in_c() -> None:
    try:
        import ovs._json  # type: ignore[import-not-found]
    except ImportError as exc:
        pytest.fail(f"ovs._json does not import ({exc}): run bash scripts/ovs-json-parser.sh "
                    f"{sys.executable} (needs Debian's python3-openvswitch)")
    import ovs.json

    assert ovs.json.PARSER == ovs.json.PARSER_C
    # what ovs.jsonrpc makes for every message it receives
    assert isinstance(ovs.json.Parser(), ovs._json.Parser)


@pytest.mark.parametrize("text", SAMPLES + BAD)
def test_the_c_parser_reads_what_the_python_one_does(text: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's extension is of another Open vSwitch release than pip's ``ovs``: both
    parsers give the same values, and both refuse what is not JSON (their messages may
    differ)."""
    import ovs.json

    c_value = ovs.json.from_string(text)
    monkeypatch.setattr(ovs.json, "PARSER", ovs.json.PARSER_PY)
    py_value = ovs.json.from_string(text)
    if text in BAD:
        assert isinstance(c_value, str) and isinstance(py_value, str), (c_value, py_value)
    else:
        assert c_value == py_value
        assert not isinstance(c_value, str) or text.startswith('"')


def test_streamed_in_pieces() -> None:
    """jsonrpc feeds what each read returned: a message split anywhere, two in a row."""
    import ovs.json

    text = SAMPLES[0] + SAMPLES[1]
    for cut in (1, 7, 100, len(SAMPLES[0])):
        parser = ovs.json.Parser()
        used = parser.feed(text[:cut])
        if not parser.is_done():
            used += parser.feed(text[cut:])
        assert parser.is_done() and used == len(SAMPLES[0])
        assert parser.finish() == ovs.json.from_string(SAMPLES[0])


def test_the_script_names_what_is_missing(tmp_path: Path) -> None:
    """No Debian module (or one of another Python's ABI): exit 1 and say so, leave the
    venv as it was; a venv without ``ovs`` (no OVN extra) has nothing to do."""
    import ovs

    package = Path(ovs.__file__).parent
    before = sorted(p.name for p in package.iterdir())
    done = subprocess.run(["bash", str(SCRIPT), sys.executable], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "OVS_DEBIAN_DIR": str(tmp_path)})
    assert done.returncode == 1
    assert "python3-openvswitch" in done.stderr and str(tmp_path) in done.stderr
    assert sorted(p.name for p in package.iterdir()) == before

    bare = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True,
                   timeout=60)
    done = subprocess.run(["bash", str(SCRIPT), str(bare / "bin" / "python")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
