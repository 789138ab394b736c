"""Smaller rooms: a module of podnet's own code over 800 lines says at its top why."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "cni", "core", "hookspecs", "linux", "node", "plugins", "sim", "testing")
LIMIT = 800
#: how far down "its top" reaches: the module's docstring or its first comment
TOP = 40


def test_every_module_over_800_lines_says_why_at_its_top() -> None:
    unexplained = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = path.read_text().splitlines()
            if len(lines) <= LIMIT:
                continue
            top = "\n".join(lines[:TOP]).lower()
            if "over 800 lines" not in top:
                unexplained.append(f"{path.relative_to(ROOT)} ({len(lines)} lines)")
    assert unexplained == [], (
        "split these, or say at their top why they are over 800 lines: "
        + ", ".join(unexplained))
