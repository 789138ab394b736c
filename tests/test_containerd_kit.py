"""The kit's containerd part (podnet.testing.containerd). The OCI image builder: a valid
image layout, every blob named by its digest, the config's diff id that of the layer, the
same bytes twice (needs only the host's busybox, Debian: busybox-static). The private
daemon's cleanup: a container left running, a daemon killed, and nothing remains (needs
root, containerd and runc)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import tarfile
from pathlib import Path

import pytest

from podnet.testing.containerd import (
    BUSYBOX,
    IMAGE_NAME,
    containerd_unavailable,
    private_containerd,
    write_busybox_image,
)
from podnet.testing.waiting import wait_for

pytestmark = pytest.mark.skipif(not BUSYBOX.is_file(),
                                reason=f"{BUSYBOX} is missing (Debian: busybox-static)")
#: why a private containerd cannot run here (None: it can)
NO_CONTAINERD = containerd_unavailable()


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile()}


def test_the_image_is_an_oci_layout_whose_blobs_match_their_digests(tmp_path: Path) -> None:
    files = _members(write_busybox_image(tmp_path / "a.tar"))
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, blob in files.items():
        if name.startswith("blobs/sha256/"):
            assert name.rsplit("/", 1)[1] == hashlib.sha256(blob).hexdigest(), name

    def blob(descriptor: dict[str, object]) -> bytes:
        data = files["blobs/sha256/" + str(descriptor["digest"]).split(":", 1)[1]]
        assert len(data) == descriptor["size"]
        return data

    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == IMAGE_NAME
    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    (layer_descriptor,) = manifest["layers"]
    layer = blob(layer_descriptor)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["architecture"] == entry["platform"]["architecture"]

    (tmp_path / "layer.tar").write_bytes(layer)
    with tarfile.open(tmp_path / "layer.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].size == BUSYBOX.stat().st_size
    assert members["bin/busybox"].mode == 0o755
    for applet in ("sh", "ping", "ip", "nc"):
        assert members[f"bin/{applet}"].issym() and members[f"bin/{applet}"].linkname == "busybox"


def test_the_same_busybox_gives_the_same_image(tmp_path: Path) -> None:
    first = write_busybox_image(tmp_path / "a.tar").read_bytes()
    assert write_busybox_image(tmp_path / "b.tar").read_bytes() == first


def test_a_missing_busybox_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere/busybox"):
        write_busybox_image(tmp_path / "a.tar", busybox=tmp_path / "nowhere" / "busybox")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, whose parent has not reaped it yet, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _shims_of(address: str) -> list[int]:
    mine = f"-address\0{address}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and mine in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(NO_CONTAINERD is not None, reason=NO_CONTAINERD or "")
@pytest.mark.parametrize("daemon_killed", [False, True], ids=["daemon-up", "daemon-killed"])
def test_close_removes_a_running_container_and_all_the_daemon_made(daemon_killed: bool
                                                                    ) -> None:
    """A container still running when the test ends (and, worse, a daemon killed under
    it): after close no process of it runs, nothing is mounted under its directory, its
    cgroups and directory are gone."""
    with private_containerd() as ctrd:
        image = ctrd.import_image(write_busybox_image(ctrd.base / "busybox.tar"))
        cid = ctrd.start(image, ["sleep", "600"])
        task = ctrd.task_pid(cid)
        assert _alive(task) and _shims_of(ctrd.address)
        base, namespace, address = ctrd.base, ctrd.namespace, ctrd.address
        if daemon_killed:
            daemon = ctrd.daemon_pid
            assert daemon is not None
            os.kill(daemon, signal.SIGKILL)
            wait_for("the daemon gone", lambda: ctrd.daemon_pid != daemon, timeout=10)
    assert not _alive(task)
    assert _shims_of(address) == []
    assert not base.exists()
    assert not any(str(base) in line for line in
                   Path("/proc/self/mountinfo").read_text().splitlines())
    assert list(Path("/sys/fs/cgroup").glob(f"*/{namespace}")) == []
