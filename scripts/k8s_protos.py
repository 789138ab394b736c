"""Write the emulator's Kubernetes protobuf descriptors (sim/protos/) from a kubectl binary.

Every Kubernetes Go client registers the gzipped ``FileDescriptorProto`` of each
``generated.proto`` it was built with (gogo-protobuf's ``proto.RegisterFile``), so the
kubectl that sends protobuf bodies carries the exact field numbers it encodes with. This
finds those descriptors in the binary, keeps the API groups the emulator serves and what
they import, drops the gogoproto import (its options stay out of the set) and writes:

* ``kubernetes.binpb``: a ``FileDescriptorSet``, loaded by ``podnet.sim.protobuf``;
* ``fields.json``: ``pointers``, the scalar fields that are Go pointers (gogoproto
  ``nullable`` not false), the ones whose zero value on the wire is a value that was set
  (every other scalar is a Go value whose zero JSON leaves out, ``omitempty``); and
  ``inline``, the message fields whose JSON is inlined into their parent's
  (``json:",inline"``, as Probe's ``handler``). The descriptors cannot tell those: the
  official client's models (generated from the API's OpenAPI, so from the JSON) do. A
  message field the model of its message does not name is inline.

    .venv/bin/python scripts/k8s_protos.py "$(command -v kubectl)"
    .venv/bin/python scripts/k8s_protos.py --check "$(command -v kubectl)"
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zlib
from pathlib import Path

from google.protobuf import descriptor_pb2

OUT = Path(__file__).resolve().parent.parent / "sim" / "protos"
#: the groups the emulator serves (and policy/v1 for evictions); imports come along
WANTED = (
    "k8s.io/api/core/v1/generated.proto",
    "k8s.io/api/apps/v1/generated.proto",
    "k8s.io/api/coordination/v1/generated.proto",
    "k8s.io/api/events/v1/generated.proto",
    "k8s.io/api/policy/v1/generated.proto",
)
GOGO = "github.com/gogo/protobuf/gogoproto/gogo.proto"
#: gogoproto.nullable is extension 65001 of FieldOptions: tag (65001 << 3 | 0), value 0
NOT_NULLABLE = b"\xc8\xde\x1f\x00"
_GZIP = re.compile(rb"\x1f\x8b\x08\x00\x00\x00\x00\x00")
_SCALARS = frozenset(
    t for name, t in descriptor_pb2.FieldDescriptorProto.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_GROUP")
)


def registered(binary: bytes) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Every generated.proto descriptor gzipped into ``binary``, by file name."""
    found: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for match in _GZIP.finditer(binary):
        try:
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(
                binary[match.start():match.start() + 4_000_000])
            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
        except Exception:  # most gzip magics in a binary are not descriptors
            continue
        if fd.name.endswith("/generated.proto"):
            found[fd.name] = fd
    return found


def closure(files: dict[str, descriptor_pb2.FileDescriptorProto]) -> list[str]:
    """The wanted files and their imports, each after what it imports."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order or name == GOGO:
            return
        if name not in files:
            raise SystemExit(f"k8s_protos: the binary has no descriptor for {name}")
        for dep in files[name].dependency:
            visit(dep)
        order.append(name)

    for name in WANTED:
        visit(name)
    return order


def _json_names(package: str, message: str) -> set[str] | None:
    """The JSON names the official client's model of ``message`` has (None: no model)."""
    from kubernetes import client

    parts = package.split(".")  # k8s.io.api.core.v1, k8s.io.apimachinery.pkg.apis.meta.v1
    group, version = parts[-2], parts[-1]
    for prefix in (f"{group.capitalize()}{version.capitalize()}", version.capitalize()):
        model = getattr(client, f"{prefix}{message}", None)
        if model is not None and hasattr(model, "attribute_map"):
            return set(model.attribute_map.values())
    return None


def _walk(package: str, prefix: str, messages: list[descriptor_pb2.DescriptorProto],
          out: dict[str, list[str]]) -> None:
    for msg in messages:
        full = f"{prefix}.{msg.name}"
        names = None if msg.options.map_entry else _json_names(package, msg.name)
        for fl in msg.field:
            opts = fl.options.SerializeToString()
            if (fl.type in _SCALARS and fl.label != fl.LABEL_REPEATED
                    and NOT_NULLABLE not in opts and not msg.options.map_entry):
                out["pointers"].append(f"{full}.{fl.name}")
            if fl.type == fl.TYPE_MESSAGE and names is not None and fl.name not in names:
                out["inline"].append(f"{full}.{fl.name}")
            fl.ClearField("options")
        _walk(package, full, list(msg.nested_type), out)


def build(binary: bytes) -> tuple[bytes, str]:
    files = registered(binary)
    out = descriptor_pb2.FileDescriptorSet()
    fields: dict[str, list[str]] = {"pointers": [], "inline": []}
    for name in closure(files):
        fd = out.file.add()
        fd.CopyFrom(files[name])
        deps = [d for d in fd.dependency if d != GOGO]
        del fd.dependency[:]
        fd.dependency.extend(deps)
        fd.ClearField("options")
        fd.options.go_package = files[name].options.go_package
        _walk(fd.package, "." + fd.package, list(fd.message_type), fields)
    listed = {key: sorted(names) for key, names in fields.items()}
    return out.SerializeToString(), json.dumps(listed, indent=0) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kubectl", type=Path, help="a kubectl binary (its protos are used)")
    parser.add_argument("--check", action="store_true", help="exit 1 if sim/protos differs")
    args = parser.parse_args(argv)
    descriptors, fields = build(args.kubectl.read_bytes())
    targets = {OUT / "kubernetes.binpb": descriptors, OUT / "fields.json": fields.encode()}
    if args.check:
        stale = [p.name for p, data in targets.items()
                 if not p.exists() or p.read_bytes() != data]
        if stale:
            print(f"k8s_protos: {', '.join(stale)} differ from {args.kubectl}'s", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path, data in targets.items():
        path.write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
