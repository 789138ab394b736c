"""The one cattrs converter between podnet's records and their wire form.

The wire form is the custom resources' camelCase JSON as the API server stores it. All
wire rules live here, not on the models: key renaming (generated for every attrs class in
``podnet.core.models``), lean output (``None`` and empty optional collections omitted),
RFC 3339 timestamps, strict types, unknown-key policy and value checks (IPs, MACs,
non-empty names, pool bounds). ``from_wire`` raises :class:`RecordError` naming the first
offending field in wire form (``status.interfaces[2].ips[0].address``), never a raw
cattrs exception.

A record is read first by one function generated for its class
(``podnet.core.structgen``), which takes each field's common value inline as its hook
declares (``_INLINE``) and hands the rest to the hook; what it does not take is read
again by cattrs' generated function with detailed validation, whose every failure
carries the attribute it happened at.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import operator
import re
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar, get_args

import attrs
import cattrs
from cattrs.fns import identity
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from podnet.core.annotations import (
    IPV4,
    check_ip,
    check_ip_address,
    check_ip_pool,
    check_ips,
    check_mac,
    check_references,
    show,
)
from podnet.core.clock import format_time, parse_time
from podnet.core.networks import wire
from podnet.core.structgen import Inline, make_fast_structure
from podnet.core.values import evolve
from podnet.hookspecs import models
from podnet.hookspecs.sections import locate_error
from podnet.hookspecs.strict import (
    RuleError,
    expected,
    is_dict,
    is_optional,
    is_tuple,
    structure_bool,
    structure_dict,
    structure_float,
    structure_int,
    structure_str,
    structure_tuple,
)

__all__ = ["RecordError", "converter", "from_wire", "metadata_as_answered", "to_wire"]

T = TypeVar("T")
Hook = Callable[[Any, Any], Any]


class RecordError(ValueError):
    """A wire object does not fit its record; ``field`` is the camelCase path to blame."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)  # both in args, so it pickles
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


#: a wire rule failed; its ``path`` continues the path from where the hook was called
_Invalid = RuleError


converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)

#: hook -> how its common case reads inline, in the one-pass function each record class
#: gets (``podnet.core.structgen``); a hook not here is called there as cattrs calls it
_INLINE: dict[Hook, Inline] = {}


# --- names ----------------------------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _model_classes(module: Any) -> tuple[type, ...]:
    found = []
    for value in vars(module).values():
        if isinstance(value, type) and attrs.has(value) and value.__module__ == module.__name__:
            attrs.resolve_types(value)
            found.append(value)
    return tuple(found)


#: the records, and the networks' objects (Subnet, IPPool, SecurityGroup)
_CLASSES = _model_classes(models) + _model_classes(wire)
#: Python attribute name -> wire key, per class; also used to name fields in errors.
_WIRE_NAMES: dict[type, dict[str, str]] = {
    cls: {a.name: wire.RENAMED.get((cls.__name__, a.name), _camel(a.name))
          for a in attrs.fields(cls)} for cls in _CLASSES
}
# The API server adds metadata podnet does not model (managedFields, selfLink, ...).
_LENIENT = frozenset({models.ObjectMeta, models.OwnerReference})


# --- primitives -------------------------------------------------------------------------------


#: recent timestamps parsed, by their text: the records of one burst carry the same few
#: moments, and a datetime is immutable, so they share one (memory, goal P4; and time)
_TIMES: dict[str, datetime] = {}
_TIMES_MAX = 4096


def _parse_time(value: Any, _: Any = None) -> datetime:
    if value.__class__ is str:
        parsed = _TIMES.get(value)
        if parsed is not None:
            return parsed
        try:
            parsed = parse_time(value)
        except ValueError:
            raise expected("RFC3339 timestamp", value) from None
        if len(_TIMES) >= _TIMES_MAX:
            _TIMES.clear()
        _TIMES[value] = parsed
        return parsed
    if not isinstance(value, datetime):
        raise expected("RFC3339 timestamp", value)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value if value.tzinfo is UTC else value.astimezone(UTC)


_INLINE[structure_str] = Inline("x", "x.__class__ is str")
_INLINE[structure_int] = Inline("x", "x.__class__ is int")
_INLINE[structure_bool] = Inline("x", "x is True or x is False")
_INLINE[_parse_time] = Inline("times.get(x) or parse(x)", None,
                              {"times": _TIMES, "parse": _parse_time})


def _enum_hook(cls: type[enum.Enum]) -> Hook:
    by_value = {member.value: member for member in cls}
    allowed = ", ".join(str(v) for v in by_value)

    def structure(value: Any, _: Any) -> enum.Enum:
        try:
            return by_value[value]
        except (KeyError, TypeError):
            raise _Invalid(f"expected one of {allowed}, got {show(value)}") from None

    _INLINE[structure] = Inline("by_value[x]", None, {"by_value": by_value})
    return structure


#: an enum member's value, read without the ``value`` property's descriptor calls
_enum_value: Callable[[enum.Enum], Any] = operator.attrgetter("_value_")


def _tuple_structure(t: Any) -> Hook:
    structure = structure_tuple(converter, t)
    item = converter.get_structure_hook(get_args(t)[0])
    form = _INLINE.get(item)
    if form is not None and form.test is None and form.value == "read(x)":
        _INLINE[structure] = Inline("tuple(map(read, x))", "x.__class__ is list",
                                    {"read": form.names["read"]})
    return structure


def _optional_structure(t: Any) -> Hook:
    # cattrs' own Optional hook dispatches on the inner type at every call.
    inner_type = next(a for a in get_args(t) if a is not type(None))
    inner = converter.get_structure_hook(inner_type)
    hook: Hook = lambda value, _: None if value is None else inner(value, inner_type)  # noqa: E731
    _inline_optional(hook, inner)
    return hook


def _inline_optional(hook: Hook, inner: Hook) -> None:
    form = _INLINE.get(inner)
    if form is not None:
        _INLINE[hook] = attrs.evolve(form, none=True)


def _optional_unstructure(t: Any) -> Callable[[Any], Any]:
    # cattrs' own Optional hook is a call per field even when the value is written as it
    # is (a string, a number): identity lets the generated record hook read it inline
    inner_type = next(a for a in get_args(t) if a is not type(None))
    inner = converter.get_unstructure_hook(inner_type)
    if inner is identity:
        return identity
    return lambda value: None if value is None else inner(value)


def _tuple_unstructure(t: Any) -> Callable[[Any], Any]:
    item_type = get_args(t)[0]
    if item_type in (str, int, bool):
        return list
    item = converter.get_unstructure_hook(item_type)
    return lambda value: list(map(item, value))


# singledispatch hooks, which cattrs consults first; the str enums get their own below
# because the str hook would otherwise take them (they subclass str).
converter.register_structure_hook(str, structure_str)
converter.register_structure_hook(int, structure_int)
converter.register_structure_hook(float, structure_float)
converter.register_structure_hook(bool, structure_bool)
converter.register_structure_hook(datetime, _parse_time)
converter.register_unstructure_hook(datetime, format_time)
for _enum in (models.Phase, models.InterfaceState):
    converter.register_structure_hook(_enum, _enum_hook(_enum))
    converter.register_unstructure_hook(_enum, _enum_value)
converter.register_structure_hook_factory(is_optional, _optional_structure)
converter.register_unstructure_hook_factory(is_optional, _optional_unstructure)
converter.register_structure_hook_factory(is_tuple, _tuple_structure)
converter.register_unstructure_hook_factory(is_tuple, _tuple_unstructure)
converter.register_structure_hook_factory(
    is_dict, functools.partial(structure_dict, converter))
converter.register_unstructure_hook_factory(is_dict, lambda _: dict)


# --- field rules ------------------------------------------------------------------------------


def _nonempty(value: Any, _: Any = None) -> str:
    text = structure_str(value)
    if not text:
        raise _Invalid("must not be empty")
    return text


_INLINE[_nonempty] = Inline("x", "x.__class__ is str and x")


def _checked(check: Callable[[str], object], accept: Callable[[str], object] | None = None,
             optional: bool = False) -> Hook:
    """A string hook that validates with ``check`` but keeps the value as written.
    ``accept``: a quick test of the common form (a dotted quad) that ``check`` passes
    too, tried first; ``optional``: None is taken as None (one call, not two)."""
    # The same addresses come back on every watch event; failures are never cached. Values
    # each record has its own (its address, its MAC) only pass through the cache: those
    # are what ``accept`` is for
    check = functools.lru_cache(maxsize=4096)(check)

    def structure(value: Any, _: Any = None) -> str | None:
        if value.__class__ is str:
            if accept is not None and accept(value):
                return value
            text = value
        elif value is None and optional:
            return None
        else:
            text = structure_str(value)
        try:
            check(text)
        except ValueError as exc:
            raise _Invalid(str(exc)) from None
        return text

    if accept is not None:
        _INLINE[structure] = Inline("x", "x.__class__ is str and accept(x)",
                                    {"accept": accept}, none=optional)
    return structure


def _checked_list(check: Callable[[tuple[str, ...]], object]) -> Hook:
    strings = converter.get_structure_hook(tuple[str, ...])
    check = functools.lru_cache(maxsize=4096)(check)

    def structure(value: Any, _: Any = None) -> tuple[str, ...]:
        items: tuple[str, ...] = strings(value, tuple[str, ...])
        try:
            check(items)
        except ValueError as exc:
            raise _Invalid(str(exc)) from None
        return items

    return structure


def _optional(hook: Hook) -> Hook:
    def structure(value: Any, t: Any = None) -> Any:
        return None if value is None else hook(value, t)

    _inline_optional(structure, hook)
    return structure


def _non_negative(value: Any, _: Any = None) -> int:
    number = structure_int(value)
    if number < 0:
        raise _Invalid(f"must not be negative, got {number}")
    return number


_INLINE[_non_negative] = Inline("x", "x.__class__ is int and x >= 0")


def _one_of(*allowed: str) -> Hook:
    def structure(value: Any, _: Any = None) -> str:
        text = structure_str(value)
        if text not in allowed:
            raise _Invalid(f"expected one of {', '.join(allowed)}, got {show(value)}")
        return text

    _INLINE[structure] = Inline("x", "x.__class__ is str and x in allowed",
                                {"allowed": frozenset(allowed)})
    return structure


def _api_version(value: Any, _: Any = None) -> str:
    text = structure_str(value)
    if not text.startswith(f"{models.GROUP}/"):
        raise _Invalid(f"expected {models.GROUP}/<version>, got {show(value)}")
    return text


_INLINE[_api_version] = Inline("x", "x.__class__ is str and x.startswith(group)",
                               {"group": f"{models.GROUP}/"})


def _ip_check(
    version: int | None, check: Callable[..., object] = check_ip
) -> Callable[[str], object]:
    # Dotted quads are by far the common case; the regex accepts exactly what ipaddress
    # accepts for them at a fraction of the cost (a cold list of 100k objects). The rest
    # goes to the shared check.
    def fast(text: str) -> object:
        if version != 6 and IPV4.fullmatch(text):
            return text
        return check(text) if version is None else check(text, version)

    return fast


#: what ``check_mac`` passes, as one regex: six octets, the first one's low bit clear
#: (unicast), and (tested apart) not all zeros
_UNICAST_MAC = re.compile(r"[0-9a-fA-F][02468aceACE](:[0-9a-fA-F]{2}){5}")


def _plain_mac(text: str) -> bool:
    return _UNICAST_MAC.fullmatch(text) is not None and text.strip("0:") != ""


_ip = _checked(_ip_check(None), IPV4.fullmatch)
_optional_ip = _checked(_ip_check(None), IPV4.fullmatch, optional=True)
_mac = _checked(check_mac, _plain_mac, optional=True)

_FIELD_HOOKS: dict[tuple[type, str], Hook] = {
    (models.ObjectMeta, "name"): _nonempty,
    (models.Condition, "type"): _nonempty,
    (models.Condition, "status"): _one_of("True", "False", "Unknown"),
    (models.NetworkRequest, "subnets"): _checked_list(check_references),
    (models.NetworkRequest, "ip_address"): _checked(_ip_check(None, check_ip_address),
                                                     IPV4.fullmatch, optional=True),
    (models.NetworkRequest, "ip_pool"): _checked_list(check_ip_pool),
    (models.NetworkRequest, "mac_address"): _mac,
    (models.NetworkRequest, "security_groups"): _checked_list(check_references),
    (models.NetworkRequest, "vips"): _checked_list(check_ips),
    (models.NetworkRequest, "eip"): _optional_ip,
    (models.PodNetworkSpec, "pod_name"): _nonempty,
    (models.PodNetworkSpec, "pod_uid"): _nonempty,
    (models.PodNetworkSpec, "node_name"): _nonempty,
    (models.PodNetworkSpec, "provider"): _nonempty,
    (models.PodNetworkSpec, "network"): _nonempty,
    (models.PodNetworkStatus, "ip"): _checked(_ip_check(4), IPV4.fullmatch, optional=True),
    (models.PodNetworkStatus, "ipv6"): _checked(_ip_check(6), optional=True),
    (models.PodNetworkStatus, "gateway"): _optional_ip,
    (models.PodNetworkStatus, "mac"): _mac,
    (models.PodNetworkStatus, "ipv6_gateway"): _checked(_ip_check(6), optional=True),
    (models.PodNetworkStatus, "prefix_length"): _optional(_non_negative),
    (models.PodNetworkStatus, "ipv6_prefix_length"): _optional(_non_negative),
    (models.PodNetworkStatus, "mtu"): _optional(_non_negative),
    (models.Route, "dst"): _nonempty,
    (models.Route, "gw"): _optional_ip,
    (models.PodNetwork, "api_version"): _api_version,
    (models.PodNetwork, "kind"): _one_of("PodNetwork"),
    (models.NodeNetworkSpec, "provider"): _nonempty,
    (models.NodeNetworkSpec, "subnets"): _checked_list(check_references),
    (models.PoolBounds, "min_idle"): _optional(_non_negative),
    (models.PoolBounds, "max_idle"): _optional(_non_negative),
    (models.IpStatus, "address"): _ip,
    (models.IpStatus, "ipv6"): _checked(_ip_check(6), optional=True),
    (models.InterfaceStatus, "id"): _nonempty,
    (models.InterfaceStatus, "mac"): _mac,
    (models.NodeNetwork, "api_version"): _api_version,
    (models.NodeNetwork, "kind"): _one_of("NodeNetwork"),
    (wire.Subnet, "api_version"): _api_version,
    (wire.Subnet, "kind"): _one_of("Subnet"),
    (wire.SubnetSpec, "provider"): _nonempty,
    (wire.SubnetSpec, "cidr_block"): _nonempty,
    (wire.IPPool, "api_version"): _api_version,
    (wire.IPPool, "kind"): _one_of("IPPool"),
    (wire.IPPoolSpec, "subnet"): _nonempty,
    (wire.SecurityGroup, "api_version"): _api_version,
    (wire.SecurityGroup, "kind"): _one_of("SecurityGroup"),
    (wire.SelectorRequirement, "key"): _nonempty,
    (wire.SelectorRequirement, "operator"): _one_of("In", "NotIn", "Exists", "DoesNotExist"),
    (wire.IngressRule, "protocol"): _one_of("all", "tcp", "udp", "icmp"),
    (wire.EgressRule, "protocol"): _one_of("all", "tcp", "udp", "icmp"),
}


#: fields whose values many records repeat (a namespace, a node, a subnet, the labels) or
#: that one record holds twice (the pod's name and uid, in the spec and the owner
#: reference): interned, each distinct value is held once, not once per record. At
#: 150,000 records that is ~0.1 GiB (goal P4). Values unique to a record (its address,
#: MAC, traceparent) are not: interning those would only add the table's entry.
_INTERNED: tuple[tuple[type, str], ...] = (
    (models.ObjectMeta, "namespace"),
    (models.ObjectMeta, "labels"),
    (models.ObjectMeta, "finalizers"),
    (models.OwnerReference, "api_version"),
    (models.OwnerReference, "kind"),
    (models.OwnerReference, "name"),
    (models.OwnerReference, "uid"),
    (models.Condition, "type"),
    (models.Condition, "status"),
    (models.Condition, "reason"),
    (models.PodNetworkSpec, "pod_name"),
    (models.PodNetworkSpec, "pod_uid"),
    (models.PodNetworkSpec, "node_name"),
    (models.PodNetworkSpec, "provider"),
    (models.PodNetworkSpec, "network"),
    (models.PodNetworkStatus, "subnet"),
    (models.PodNetworkStatus, "gateway"),
    (models.PodNetworkStatus, "interface"),
    (models.PodNetworkStatus, "ipv6_gateway"),
    (models.PodNetwork, "api_version"),
    (models.PodNetwork, "kind"),
    (models.NodeNetworkSpec, "provider"),
    (models.InterfaceStatus, "subnet"),
    (models.IpStatus, "owner"),
    (models.IpStatus, "subnet"),
    (models.NodeNetwork, "api_version"),
    (models.NodeNetwork, "kind"),
)


def _interned(hook: Hook, t: Any) -> Hook:
    intern = sys.intern

    def structure(value: Any, _: Any = None) -> Any:
        out = hook(value, t)
        cls = out.__class__
        if cls is str:
            return intern(out)
        if cls is tuple:
            return tuple(intern(x) if x.__class__ is str else x for x in out)
        if cls is dict:
            return {intern(k): intern(v) if v.__class__ is str else v for k, v in out.items()}
        return out  # None, or a str enum (its members are one object each already)

    form = _INLINE.get(hook)
    if (form is not None and form.value == "x" and "intern" not in form.names
            and (t is str or (form.none and t == str | None))):
        _INLINE[structure] = Inline("intern(x)", form.test, {**form.names, "intern": intern},
                                    none=form.none)
    return structure


def _interned_str(optional: bool, nonempty: bool) -> Hook:
    """``_interned`` of a plain string field (``_str``, ``_nonempty``, optional or not) in
    one call: a string as expected is interned at once, anything else goes through the
    hook that says what is wrong."""
    intern = sys.intern
    slow = _nonempty if nonempty else structure_str

    def structure(value: Any, _: Any = None) -> Any:
        if value.__class__ is str and (value or not nonempty):
            return intern(value)
        if value is None and optional:
            return None
        return intern(slow(value))

    _INLINE[structure] = Inline("intern(x)", "x.__class__ is str" + (" and x" if nonempty else ""),
                                {"intern": intern}, none=optional)
    return structure


def _interned_strings(t: Any) -> Hook:
    """``_interned`` of a ``dict[str, str]`` or ``tuple[str, ...]`` field in one pass:
    ``sys.intern`` refuses anything but a plain string, and then the general hook says
    what is wrong (or takes the str subclass)."""
    intern = sys.intern
    slow = _interned(converter.get_structure_hook(t), t)
    if is_dict(t):
        def mapping(value: Any, _: Any = None) -> Any:
            if value.__class__ is dict:
                try:
                    return {intern(k): intern(v) for k, v in value.items()}
                except TypeError:
                    pass
            return slow(value, t)

        _INLINE[mapping] = Inline("{intern(k): intern(v) for k, v in x.items()}",
                                  "x.__class__ is dict", {"intern": intern})
        return mapping

    def strings(value: Any, _: Any = None) -> Any:
        if value.__class__ is list:
            try:
                return tuple(map(intern, value))
            except TypeError:
                pass
        return slow(value, t)

    _INLINE[strings] = Inline("tuple(map(intern, x))", "x.__class__ is list", {"intern": intern})
    return strings


for _cls, _name in _INTERNED:
    _type = attrs.fields_dict(_cls)[_name].type
    _own = _FIELD_HOOKS.get((_cls, _name))
    if _own is None and _type in (str, str | None):
        _FIELD_HOOKS[(_cls, _name)] = _interned_str(_type is not str, False)
    elif _own is _nonempty and _type is str:
        _FIELD_HOOKS[(_cls, _name)] = _interned_str(False, True)
    elif _own is None and _type in (dict[str, str], tuple[str, ...]):
        _FIELD_HOOKS[(_cls, _name)] = _interned_strings(_type)
    else:
        _FIELD_HOOKS[(_cls, _name)] = _interned(_own or converter.get_structure_hook(_type), _type)


def _check_pool(bounds: models.PoolBounds) -> None:
    low, high = bounds.min_idle, bounds.max_idle
    if low is not None and high is not None and low > high:
        raise _Invalid(f"minIdle {low} is greater than maxIdle {high}", ("minIdle",))


def _check_request(request: models.NetworkRequest) -> None:
    # Each is fine alone; together the pod would ask for two different addresses.
    if request.ip_address is not None and request.ip_pool:
        raise _Invalid("conflicts with ipAddress: set only one of them", ("ipPool",))


#: Checks across fields of one record, run after it is built.
_CLASS_CHECKS: dict[type, Callable[[Any], None]] = {
    models.PoolBounds: _check_pool,
    models.NetworkRequest: _check_request,
}


# --- generated record hooks -------------------------------------------------------------------


def _omittable(a: attrs.Attribute[Any]) -> bool:
    # Only "nothing here" defaults are dropped, so a value that means something (a phase,
    # a false flag) is always written out.
    default = a.default
    factory = getattr(default, "factory", None)  # an attrs Factory
    if factory is not None:
        return factory in (dict, tuple, list)
    return default is None or default == ()


#: flags whose default is the common case, added after records were already stored: left
#: out when default, so that every record written before them reads (and is written) the
#: same way (``pooled``: an interface that holds no pod address is the exception)
_OMIT_WHEN_DEFAULT = {(models.InterfaceStatus, "pooled")}


def _record_unstructure(cls: type) -> Callable[[Any], dict[str, Any]]:
    names = _WIRE_NAMES[cls]
    overrides: dict[str, Any] = {
        a.name: override(rename=names[a.name],
                         omit_if_default=_omittable(a) or (cls, a.name) in _OMIT_WHEN_DEFAULT)
        for a in attrs.fields(cls)
    }
    return make_dict_unstructure_fn(cls, converter, **overrides)


#: records whose wire form is usually a flat object of scalars that many records repeat
#: (the Ready condition of records routed in the same second, the default requests, an
#: empty pool): each distinct one is structured once and then shared (they are frozen),
#: found by its keys, its values and their types (``true`` is not ``1``). At 150,000
#: records that is both parse time and memory (goals P5, P4).
_SHARED: frozenset[type] = frozenset({models.Condition, models.NetworkRequest,
                                      models.PoolBounds})
_SHARED_MAX = 4096


def _record_structure(cls: type) -> Hook:
    names = _WIRE_NAMES[cls]
    overrides: dict[str, Any] = {
        a.name: override(rename=names[a.name], struct_hook=_FIELD_HOOKS.get((cls, a.name)))
        for a in attrs.fields(cls)
    }
    generated: Callable[[Any], Any] = make_dict_structure_fn(
        cls, converter, _cattrs_forbid_extra_keys=cls not in _LENIENT, **overrides
    )
    check = _CLASS_CHECKS.get(cls)
    # the same hooks read in one function, each common value inline (``_INLINE``): what
    # parses does so in one pass; what does not is parsed again by ``generated``, whose
    # errors name every field to blame (a record that parses never pays for that)
    hooks = {a.name: _FIELD_HOOKS.get((cls, a.name)) or converter.get_structure_hook(a.type)
             for a in attrs.fields(cls)}
    fast = make_fast_structure(cls, names, hooks, _INLINE,
                               forbid_extra_keys=cls not in _LENIENT, check=check)
    if fast is None:  # a class the one-pass function cannot build: cattrs' lean function
        lean: Callable[[Any], Any] = make_dict_structure_fn(
            cls, converter, _cattrs_forbid_extra_keys=cls not in _LENIENT,
            _cattrs_detailed_validation=False, **overrides
        )

        def fast(value: Any) -> Any:
            record = lean(value)
            if check is not None:
                check(record)
            return record

    if cls in _SHARED:
        fast = _sharing(fast)
    read: Callable[[Any], Any] = fast

    def structure(value: Any, _: Any = None) -> Any:
        try:
            return read(value)
        except Exception:
            pass
        if value.__class__ is not dict and not isinstance(value, Mapping):
            raise expected("object", value)
        record = generated(value)
        if check is not None:
            check(record)
        return record

    # a record field of another record: its one-pass function calls this one directly
    _INLINE[structure] = Inline("read(x)", None, {"read": read})
    return structure


def _sharing(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    shared: dict[tuple[tuple[Any, ...], ...], Any] = {}

    def read_shared(value: Any) -> Any:
        values = value.values()  # not an object: raises, and the caller reads it
        key = (tuple(value), tuple(map(type, values)), tuple(values))
        try:
            return shared[key]
        except KeyError:
            pass
        except TypeError:  # a list or an object among the values: not shared
            return read(value)
        record = read(value)  # what fails raises here, and is not kept
        if len(shared) >= _SHARED_MAX:
            shared.clear()
        shared[key] = record
        return record

    return read_shared


converter.register_structure_hook_factory(lambda t: t in _WIRE_NAMES, _record_structure)
converter.register_unstructure_hook_factory(lambda t: t in _WIRE_NAMES, _record_unstructure)

# Generate every record's hooks now: the first PodNetwork should not pay for codegen.
for _cls in _CLASSES:
    converter.get_structure_hook(_cls)
    converter.get_unstructure_hook(_cls)


# --- public API -------------------------------------------------------------------------------


def to_wire(obj: Any) -> dict[str, Any]:
    """An attrs record as the JSON-ready dict the API server stores."""
    result: dict[str, Any] = converter.unstructure(obj)
    return result


def from_wire(cls: type[T], data: Mapping[str, Any]) -> T:
    """Build ``cls`` from its wire form; :class:`RecordError` names what is wrong."""
    try:
        return converter.structure(data, cls)
    except Exception as exc:
        path, message = locate_error(exc, _WIRE_NAMES)
        raise RecordError(path, message) from exc


#: ObjectMeta's wire keys -> attribute names; a timestamp as the converter reads one
_META_ATTRS = META_ATTRS = {wire: name for name, wire in _WIRE_NAMES[models.ObjectMeta].items()}
read_time = _parse_time


def metadata_as_answered(sent: models.ObjectMeta, sent_wire: Mapping[str, Any],
                         answer: Mapping[str, Any]) -> models.ObjectMeta:
    """What reading ``answer`` (the metadata the API server answered a write of ``sent``
    with; ``sent_wire`` its wire form) gives, reading only what the server changed or
    added (uid, resourceVersion, creationTimestamp, ...): the rest reads as ``sent``.
    Every key ``sent_wire`` has must be in ``answer``. :raise RecordError: as
    :func:`from_wire`."""
    changed = {k: v for k, v in answer.items() if k not in sent_wire or sent_wire[k] != v}
    if not changed:
        return sent
    # the name goes along: a record without one does not parse
    part = from_wire(models.ObjectMeta, {"name": answer.get("name"), **changed})
    return evolve(sent, **{_META_ATTRS[k]: getattr(part, _META_ATTRS[k])
                           for k in changed if k in _META_ATTRS})


# --- records that do not parse ------------------------------------------------------------


@attrs.frozen
class UnreadablePodNetwork(models.PodNetwork):
    """What podnet can still tell of a PodNetwork that does not parse: who it is and which
    addresses its status names. Kept in the cache so those addresses stay owned (never
    handed out, swept or disposed) while the record is reported; never acted on."""

    error: str = ""


def salvage_pod_network(data: Mapping[str, Any], error: RecordError) -> UnreadablePodNetwork:
    """Read a PodNetwork leniently, without the converter: only plain strings are taken,
    an address only if it is one. Whatever else is wrong is left out."""

    def text(where: Any, key: str) -> str | None:
        value = where.get(key) if isinstance(where, Mapping) else None
        return value if isinstance(value, str) and value else None

    def address(where: Any, key: str) -> str | None:
        value = text(where, key)
        if value is None:
            return None
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return None
        return value

    meta, spec, status = (data.get(k) or {} for k in ("metadata", "spec", "status"))
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    ip, ipv6 = address(status, "ip"), address(status, "ipv6")
    phase = text(status, "phase")
    try:
        parsed = models.Phase(phase) if phase else models.Phase.PENDING
    except ValueError:
        parsed = models.Phase.PENDING
    if ip is not None and parsed is models.Phase.PENDING:
        parsed = models.Phase.ALLOCATED  # it names an address: it owns it
    return UnreadablePodNetwork(
        metadata=models.ObjectMeta(
            name=text(meta, "name") or "", namespace=text(meta, "namespace"),
            uid=text(meta, "uid"), resource_version=text(meta, "resourceVersion"),
            labels={k: v for k, v in (labels or {}).items()
                    if isinstance(k, str) and isinstance(v, str)},
        ),
        spec=models.PodNetworkSpec(
            pod_name=text(spec, "podName") or "", pod_uid=text(spec, "podUid") or "",
            node_name=text(spec, "nodeName") or "", provider=text(spec, "provider") or "",
            network=text(spec, "network") or models.DEFAULT_NETWORK,
        ),
        status=models.PodNetworkStatus(phase=parsed, ip=ip, ipv6=ipv6,
                                       interface=text(status, "interface"),
                                       address_seal=text(status, "addressSeal")),
        error=str(error),
    )


def readable_ready(obj: Mapping[str, Any]) -> tuple[models.Condition, ...]:
    """The Ready condition of a record that does not parse, if that much of it does (its
    transition time is kept while it stays False)."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for raw in conditions if isinstance(conditions, list) else ():
        if isinstance(raw, Mapping) and raw.get("type") == "Ready":
            try:
                return (from_wire(models.Condition, raw),)
            except RecordError:
                return ()
    return ()


def readable_generation(meta: Mapping[str, Any]) -> int | None:
    """``metadata.generation`` of a record that does not parse, if it is a number."""
    generation = meta.get("generation")
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else None
