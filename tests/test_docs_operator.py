"""The operator's documents (README, CHANGELOG.md, docs/upgrading.md,
docs/troubleshooting.md, bench/README.md) hold together: their links lead somewhere, the
troubleshooting guide's cases each say symptom, command, cause and fix, and what it quotes
of podnet's output is what the code says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "docs" / "upgrading.md",
        ROOT / "docs" / "troubleshooting.md", ROOT / "bench" / "README.md"]
TROUBLE = ROOT / "docs" / "troubleshooting.md"
LINK = re.compile(r"\[[^\]]+\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (outside code blocks)."""
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or (anchor and path.suffix == ".md"
                                 and anchor not in anchors(path)):
            broken.append(target)
    assert broken == []


def test_the_changelog_starts_with_what_is_not_released() -> None:
    headings = [line for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
                if line.startswith("## ")]
    assert headings[0] == "## Unreleased"
    versions = re.findall(r"^### (\d+\.\d+\.\d+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert versions[0] == "0.8.0" and versions[-1] == "0.1.0"


def test_the_readme_keeps_one_table_of_performance() -> None:
    """The performance logs are bench/README.md's; the README keeps a table of the goals."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Performance\n", 1)[1].split("\n## ", 1)[0]
    section = section.split("\n### ", 1)[0]
    assert len(section.splitlines()) <= 25
    assert "bench/README.md" in section
    assert "## Results by goal" in (ROOT / "bench" / "README.md").read_text()
    # the install section comes first, and ends in a pod
    assert readme.index("## Install on a cluster") < readme.index("## The demo")
    assert "**5. A pod.**" in readme


def test_the_guide_has_ten_cases_each_with_symptom_command_cause_and_fix() -> None:
    text = TROUBLE.read_text()
    cases = re.split(r"^## \d+\. ", text, flags=re.M)[1:]
    assert len(cases) == 10
    for case in cases:
        title = case.splitlines()[0]
        assert "**Symptom.**" in case, title
        assert "**Shows it.**" in case, title
        assert "**Cause" in case, title
        assert "fix.**" in case.lower(), title


#: what the guide quotes, and the module of podnet that says it
QUOTED = [
    ("NoProvider", "core/placement.py"),
    ("UnknownProvider", "core/placement.py"),
    ("no provider serves it, so its pods get no network", "core/placement.py"),
    ("NoSubnet", "core/reconcile/podnetwork.py"),
    ("InvalidRequest", "core/reconcile/podnetwork.py"),
    ("UnknownAnnotation", "core/reconcile/podnetwork.py"),
    ("AddressFieldsFrozen", "core/reconcile/podnetwork.py"),
    ("PoolUnavailable", "core/reconcile/nodepool.py"),
    ("its {provider} pool cannot be read", "core/reconcile/nodepool.py"),
    ("PoolError", "core/reconcile/nodepool.py"),
    ("WaitingForAddress", "core/reconcile/podnetwork_wording.py"),
    ("waiting for an address: ", "core/reconcile/podnetwork_steps.py"),
    ("no idle address", "core/reconcile/podnetwork_allocate.py"),
    ("invalid MAC address", "hookspecs/annotations.py"),
    ("no report: no agent has run on this node, or its ", "app/status.py"),
    ("the agent is down or cannot reach the API server", "app/status.py"),
    ("its report was last renewed", "app/status.py"),
    ("PoolReady=", "app/status.py"),
    ("the agent is starting", "node/health.py"),
    ("its PodNetworks are not listed yet", "node/health.py"),
    ("its first report is not written yet", "node/health.py"),
    ("the dataplane's state cannot be read", "node/health.py"),
    ("caches not synced", "app/host.py"),
    ("threads died", "core/engine.py"),
    ("keys ready and no worker took one for", "core/engine.py"),
    ("clean: every cloud address is owned or pooled, every record's ", "app/audit.py"),
    ("no record owns it and no pool holds it", "app/audit.py"),
    ('"finding", "node", "provider", "ip", "detail"', "app/audit.py"),
    ("install-cni", "deploy/node.yaml"),
    ("9254", "deploy/node.yaml"),
]


@pytest.mark.parametrize(("quote", "source"), QUOTED, ids=[q for q, _ in QUOTED])
def test_what_the_guide_quotes_is_what_podnet_says(quote: str, source: str) -> None:
    code = (ROOT / source).read_text()
    assert quote in code, f"{source} no longer says {quote!r}: update the guide"
    guide = " ".join(TROUBLE.read_text().split())
    # the guide writes a code string's placeholders as examples; compare the fixed part
    fixed = max(re.split(r"\{[^}]*\}", quote.strip('"').replace('", "', "`, `")), key=len)
    assert " ".join(fixed.split()) in guide, f"the guide does not say {fixed!r}"
