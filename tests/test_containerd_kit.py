"""The kit's OCI image builder (podnet.testing.containerd): a valid image layout, every
blob named by its digest, the config's diff id that of the layer, the same bytes twice.
Needs only the host's busybox (Debian: busybox-static)."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from podnet.testing.containerd import BUSYBOX, IMAGE_NAME, write_busybox_image

pytestmark = pytest.mark.skipif(not BUSYBOX.is_file(),
                                reason=f"{BUSYBOX} is missing (Debian: busybox-static)")


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
