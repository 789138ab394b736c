"""A regular (non-editable) install imports every package, and ships its type marker."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_and_imports(tmp_path: Path) -> None:
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheel_dir), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    wheels = list(wheel_dir.glob("podnet-*.whl"))
    assert len(wheels) == 1
    # the license travels with the wheel, and its metadata names it
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert "License-Expression: Apache-2.0" in whl.read(metadata).decode()
        (license_file,) = [n for n in names if n.endswith("/licenses/LICENSE")]
        assert whl.read(license_file) == (ROOT / "LICENSE").read_bytes()
        # the API emulator's built-in schemas are package data
        assert "podnet/sim/openapi-v1.32.json" in names
    assert b"Apache License" in (ROOT / "LICENSE").read_bytes()[:200]
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheels[0])],
        check=True, capture_output=True, text=True, timeout=300,
    )
    assert (target / "podnet" / "core" / "py.typed").exists()
    assert (target / "podnet" / "hookspecs" / "py.typed").exists()
    assert (target / "podnet" / "node" / "py.typed").exists()
    assert (target / "podnet" / "sim" / "protos" / "fields.json").exists()
    code = (
        "import podnet.core.engine, podnet.hookspecs, podnet.plugins.reference.provider, "
        "podnet.plugins.bbc, podnet.plugins.ecs, podnet.plugins.ovn, podnet.sim, podnet.node; "
        # the emulator's data files travel too: the CRDs and the protobuf descriptors
        "from podnet.sim import protobuf, schema; schema.load_crds(None); "
        "protobuf.message_class('k8s.io.api.core.v1.Pod'); "
        "import podnet.core, sys; print(podnet.core.__file__)"
    )
    # run from an empty folder so the source tree cannot be imported by accident
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True, timeout=60).stdout
    assert str(target) in out
    # the CNI plugin is no Python: the static program make and the image build from
    # cni/podnet-cni.c (install-cni copies that file), nothing of it in the wheel
    assert not (target / "podnet" / "cni").exists()
