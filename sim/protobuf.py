"""Kubernetes protobuf request bodies, read into the JSON objects the emulator stores.

kubectl's typed clients (``kubectl create namespace``, ``create configmap``, ``create
secret``, ``drain``'s evictions...) send built-in objects as
``application/vnd.kubernetes.protobuf``: the magic ``k8s\\x00`` and a ``runtime.Unknown``
(its ``typeMeta``, then ``raw``, the object's own message). The messages are those
kubectl itself is built with (``protos/kubernetes.binpb``, taken from the binary by
``scripts/k8s_protos.py``), and a message becomes JSON as the Go types marshal it: a
value-typed scalar at its zero is left out (``omitempty``), a pointer's is kept, an
inline member's fields are its parent's (``protos/fields.json`` lists both), the
apimachinery types (Time, MicroTime, Duration, Quantity, IntOrString, RawExtension,
FieldsV1) take their JSON forms, ``bytes`` are base64.

The emulator answers in JSON: kubectl's ``Accept`` names JSON after protobuf. An
``Accept`` that admits no JSON gets 406, as upstream's content negotiation answers a media
type it cannot encode (``negotiation.NegotiateOutputMediaType``, k8s.io/apiserver).
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
from importlib import resources
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

__all__ = [
    "CONTENT_TYPE",
    "MAGIC",
    "ProtobufError",
    "Unsupported",
    "accepts_json",
    "decode",
    "message_class",
    "message_name",
]

CONTENT_TYPE: Final = "application/vnd.kubernetes.protobuf"
MAGIC: Final = b"k8s\x00"
_META: Final = "k8s.io.apimachinery.pkg.apis.meta.v1"
_UNKNOWN: Final = "k8s.io.apimachinery.pkg.runtime.Unknown"
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: media types the emulator's JSON answers (YAML too: JSON is YAML, and the emulator
#: has always answered a YAML Accept so)
_JSON_TYPES: Final = frozenset({"application/json", "application/yaml", "application/*", "*/*"})


class ProtobufError(ValueError):
    """A body that is not a Kubernetes protobuf envelope or its message (400)."""


class Unsupported(ProtobufError):
    """A well-formed envelope of a kind with no protobuf form here, as custom resources
    have none (415)."""


@functools.cache
def _pool() -> descriptor_pool.DescriptorPool:
    data = resources.files(__package__).joinpath("protos/kubernetes.binpb").read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for fd in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        pool.Add(fd)
    return pool


@functools.cache
def _fields(key: str) -> frozenset[str]:
    """``pointers`` (Go pointer scalars) or ``inline`` (``json:",inline"`` messages)."""
    text = resources.files(__package__).joinpath("protos/fields.json").read_text()
    return frozenset(name.lstrip(".") for name in json.loads(text)[key])


def message_class(full_name: str) -> type[Message]:
    """The generated class of a message of the descriptor set (KeyError: none)."""
    cls: type[Message] = message_factory.GetMessageClass(
        _pool().FindMessageTypeByName(full_name))
    return cls


def message_name(api_version: str, kind: str) -> str:
    """The protobuf message of a built-in kind (``apps/v1``, ``Deployment`` ->
    ``k8s.io.api.apps.v1.Deployment``): upstream's package per group, named by the group's
    first label (``events.k8s.io`` -> ``events``)."""
    group, _, version = api_version.rpartition("/")
    package = f"k8s.io.api.{group.split('.')[0] or 'core'}.{version}"
    return f"{package}.{kind}"


def decode(body: bytes) -> dict[str, Any]:
    """The JSON object a protobuf request body carries, ``apiVersion`` and ``kind`` set."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix")
    try:
        unknown = message_class(_UNKNOWN).FromString(body[len(MAGIC):])
    except DecodeError as exc:
        raise ProtobufError(f"the protobuf envelope cannot be read: {exc}") from None
    type_meta = getattr(unknown, "typeMeta")  # noqa: B009 (generated at run time)
    api_version, kind = type_meta.apiVersion, type_meta.kind
    if not kind or not api_version:
        raise ProtobufError("the protobuf envelope names no apiVersion and kind")
    encoding = getattr(unknown, "contentEncoding")  # noqa: B009
    if encoding:
        raise ProtobufError(f"contentEncoding {encoding!r} is not supported")
    try:
        cls = message_class(message_name(api_version, kind))
    except KeyError:
        try:
            # the options every group registers (DeleteOptions...) are meta/v1's messages
            cls = message_class(f"{_META}.{kind}")
        except KeyError:
            raise Unsupported(f"{kind} in {api_version} has no protobuf form here") from None
    try:
        msg = cls.FromString(getattr(unknown, "raw"))  # noqa: B009
    except DecodeError as exc:
        raise ProtobufError(f"{kind} in {api_version}: the message cannot be read: {exc}"
                            ) from None
    return {"apiVersion": api_version, "kind": kind, **_object(msg)}


def accepts_json(accept: str | None) -> bool:
    """Whether an ``Accept`` header admits the JSON the emulator answers with (an absent
    or empty one does)."""
    if not accept or not accept.strip():
        return True
    for option in accept.split(","):
        media, *params = (p.strip() for p in option.split(";"))
        q = next((p.partition("=")[2] for p in params if p.startswith("q=")), "1")
        if media.lower() in _JSON_TYPES and q not in ("0", "0.0", "0.00", "0.000"):
            return True
    return False


# --- message -> JSON ----------------------------------------------------------------------


def _object(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    desc: Descriptor = msg.DESCRIPTOR
    pointers, inline = _fields("pointers"), _fields("inline")
    for field, value in msg.ListFields():
        if _is_map(field):
            vfield = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value(vfield, v) for k, v in value.items()}
        elif _repeated(field):
            out[field.name] = [_value(field, v) for v in value]
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            converted = _special(field.message_type.full_name, value)
            if f"{desc.full_name}.{field.name}" in inline and isinstance(converted, dict):
                out.update(converted)
            elif converted is not _OMIT:
                out[field.name] = converted
        elif value or f"{desc.full_name}.{field.name}" in pointers:
            # a Go value at its zero is marshalled but omitempty in JSON; a pointer is set
            out[field.name] = _value(field, value)
    return out


def _repeated(field: FieldDescriptor) -> bool:
    # ``label`` is gone from newer runtimes, ``is_repeated`` absent from older ones
    flag = getattr(field, "is_repeated", None)
    if flag is None:
        return bool(field.label == FieldDescriptor.LABEL_REPEATED)
    return bool(flag)


def _is_map(field: FieldDescriptor) -> bool:
    return bool(field.type == FieldDescriptor.TYPE_MESSAGE
                and field.message_type.GetOptions().map_entry)


_OMIT: Final = object()


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        converted = _special(field.message_type.full_name, value)
        return None if converted is _OMIT else converted
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def _special(full_name: str, msg: Any) -> Any:
    """The JSON of the apimachinery types that marshal themselves; others recursively."""
    if full_name in (f"{_META}.Time", f"{_META}.MicroTime"):
        if msg.ByteSize() == 0:
            return _OMIT  # the zero time: null in JSON, left out here
        when = _EPOCH + datetime.timedelta(seconds=msg.seconds)
        if full_name.endswith("MicroTime"):
            micros = msg.nanos // 1000
            return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}Z"
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    if full_name == f"{_META}.Duration":
        return _go_duration(msg.duration)
    if full_name == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        return msg.string
    if full_name == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        return msg.strVal if msg.type == 1 else msg.intVal
    if full_name in ("k8s.io.apimachinery.pkg.runtime.RawExtension", f"{_META}.FieldsV1"):
        raw = msg.raw if full_name.endswith("RawExtension") else getattr(msg, "Raw")  # noqa: B009
        if not raw:
            return _OMIT
        try:
            return json.loads(raw)
        except ValueError:
            raise ProtobufError(f"{full_name}: raw is not JSON") from None
    return _object(msg)


def _go_duration(nanos: int) -> str:
    """Go's ``time.Duration.String`` (``1h2m3.5s``, ``0s``, ``1.5ms``)."""
    if nanos == 0:
        return "0s"
    sign, n = ("-" if nanos < 0 else ""), abs(nanos)
    if n < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if n >= size or unit == "ns":
                return sign + _trim(n / size) + unit
    hours, rest = divmod(n, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = _trim(rest / 1_000_000_000)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "")
    return sign + out + seconds + "s"


def _trim(number: float) -> str:
    return f"{number:.9f}".rstrip("0").rstrip(".")
