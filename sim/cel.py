"""A CRD's ``x-kubernetes-validations`` rules, evaluated as kube-apiserver evaluates them.

The CEL language itself is cel-python's (``celpy``: the parser, the macros, the standard
functions, error absorption by ``&&``/``||``); this module adds what the API server adds:

* the Kubernetes CEL libraries podnet's rules use: IP and CIDR (``ip``, ``isIP``,
  ``ip.isCanonical``, ``family``, ``isUnspecified``, ``isLoopback``,
  ``isLinkLocalMulticast``, ``isLinkLocalUnicast``, ``isGlobalUnicast``, ``cidr``,
  ``isCIDR``, ``containsIP``, ``containsCIDR``, ``ip()`` of a CIDR, ``masked``,
  ``prefixLength``, ``string()`` of both), cel-go's string extensions (``charAt``,
  ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``, ``split``,
  ``substring``, ``trim``, ``join``), the list library (``isSorted``, ``sum``, ``max``,
  ``indexOf``, ``lastIndexOf``) and the regex library (``find``, ``findAll``);
* ``self`` bound to the value at the rule's schema node, typed by the schema (an
  ``integer`` is an int, a ``number`` a double; at the root ``self.metadata`` holds only
  ``name`` and ``generateName``);
* transition rules (those naming ``oldSelf``), evaluated only where the old value
  correlates (object properties, map entries, items of ``x-kubernetes-list-type: map``
  lists by their keys), unless ``optionalOldSelf`` (then ``oldSelf`` is an optional);
* ``message``, ``messageExpression`` (its failures fall back to the message),
  ``fieldPath`` and ``reason`` (FieldValueInvalid, FieldValueForbidden,
  FieldValueRequired, FieldValueDuplicate), and the error words of upstream's
  ``apiextensions-apiserver`` CEL validator;
* ratcheting (CRDValidationRatcheting, on by default since 1.30): a rule without
  ``oldSelf`` that fails on a value equal to its old one is a warning, not an error;
* the checks made when a CRD is created: the rule parses, names only known functions,
  variables and (through ``self``) declared fields, ``oldSelf`` only where a value can
  correlate, a ``fieldPath`` that exists, a known ``reason``; a failure names the rule.

What it does not do: CEL's static type checking beyond those names, and cost estimation
(upstream refuses a CRD whose rules' estimated cost exceeds the limits; the bounds of
podnet's schemas, ``maxItems``/``maxLength``, are what keep theirs low).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, Evaluator

from podnet.core.cluster.patch import json_equal
from podnet.sim.cel_library import (
    CIDR,
    FUNCTIONS,
    IP,
    IP_NAMESPACE,
    KNOWN_FUNCTIONS,
    MACROS,
    Optional,
)

__all__ = [
    "CIDR",
    "IP",
    "CompileError",
    "Outcome",
    "Validator",
    "Violation",
    "compile_schema",
    "evaluate",
]

REASONS: Final = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
                  "FieldValueDuplicate")
#: errors of the OpenAPI schema that keep upstream from running any rule
BLOCKING: Final = frozenset({"FieldValueNotSupported", "FieldValueRequired",
                             "FieldValueTooLong", "FieldValueTooMany",
                             "FieldValueTypeInvalid"})
NOT_CHECKED: Final = ("some validation rules were not checked because the object was "
                      "invalid; correct the existing errors to complete validation")
_MESSAGE_LIMIT: Final = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes
_NEWLINES: Final = re.compile(r"[\n\r]+")  # the line breaks of CEL's grammar


class CompileError(ValueError):
    """A rule kube-apiserver would refuse when the CRD is created."""


@dataclass(frozen=True)
class Violation:
    """One field error, as upstream's ``field.Error``: the path, the reason (the
    StatusCause reason) and the message without the path."""

    field: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Outcome:
    """What the rules said: errors (a 422) and warnings (ratcheted failures)."""

    errors: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --- compiling the rules of a schema ------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One compiled ``x-kubernetes-validations`` entry."""

    rule: str
    program: celpy.Runner
    message: str = ""
    message_program: celpy.Runner | None = None
    field_path: str = ""  # normalized: "gateway", "a.b", "m[key]"
    reason: str | None = None
    uses_old_self: bool = False
    optional_old_self: bool = False
    #: (self, oldSelf) as JSON -> the verdict: a rule is a function of its two values,
    #: and a status write or a retried apply meets the same values again
    verdicts: dict[tuple[str, str], tuple[str, str]] = field(
        default_factory=dict, compare=False, repr=False)

    @property
    def error_string(self) -> str:
        """ruleErrorString: the message if there is one, else the rule."""
        return self.message.strip() if self.message else self.rule.strip()

    @property
    def default_message(self) -> str:
        return self.message.strip() if self.message else f"failed rule: {self.rule.strip()}"


@dataclass
class Validator:
    """The rules of one schema node and of the nodes under it that have any."""

    schema: Mapping[str, Any]
    rules: tuple[Rule, ...] = ()
    properties: dict[str, Validator] = field(default_factory=dict)
    items: Validator | None = None
    additional: Validator | None = None
    root: bool = False

    @property
    def type(self) -> str:
        return str(self.schema.get("type") or "")


class _Evaluator(Evaluator):
    """celpy's interpreter with CEL's rule for ``map`` and ``filter``: an element's
    error is the macro's value (which ``||`` and ``&&`` may absorb), not an exception
    that ends the whole evaluation."""

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _Evaluator(ast, activation=self.activation)

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
        try:
            return super().member_dot_arg(tree)
        except CELEvalError as exc:
            return exc

    # celpy evaluates both sides of || and && before it combines them (absorbing an
    # error on either side); cel-go stops at a left side that decides, as here. The
    # result is the same either way: only the time differs.

    def conditionalor(self, tree: lark.Tree[Any]) -> Any:
        return self._logical(tree, "_||_", decides=True)

    def conditionaland(self, tree: lark.Tree[Any]) -> Any:
        return self._logical(tree, "_&&_", decides=False)

    def _logical(self, tree: lark.Tree[Any], name: str, decides: bool) -> Any:
        if len(tree.children) != 2:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and bool(left) is decides:
            return celtypes.BoolType(decides)
        right = self.visit(tree.children[1])
        try:
            return self.activation.resolve_function(name)(left, right)
        except TypeError as exc:
            return CELEvalError(f"no such overload: {name}", TypeError, exc.args)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


_ENV: Final = celpy.Environment(runner_class=_Runner)


def _tokens(tree: lark.Tree[Any]) -> Iterator[tuple[str, lark.Tree[Any]]]:
    for sub in tree.iter_subtrees():
        yield str(sub.data), sub


def _ident_of(tree: Any) -> str | None:
    """The identifier an ``expr`` subtree is, when it is just one."""
    while isinstance(tree, lark.Tree) and len(tree.children) == 1 and tree.data != "ident":
        tree = tree.children[0]
    if isinstance(tree, lark.Tree) and tree.data == "ident":
        return str(tree.children[0])
    return None


def _member_schema(tree: Any, schemas: Mapping[str, Mapping[str, Any]]
                   ) -> Mapping[str, Any] | None:
    """The schema of a ``self.a.b`` chain (``None`` when it is something else)."""
    if not isinstance(tree, lark.Tree):
        return None
    if tree.data in ("member", "primary") and len(tree.children) == 1:
        return _member_schema(tree.children[0], schemas)
    if tree.data == "ident":
        return schemas.get(str(tree.children[0]))
    if tree.data == "member_dot":
        parent = _member_schema(tree.children[0], schemas)
        if parent is None:
            return None
        name = str(tree.children[1])
        props = parent.get("properties")
        if (parent.get("type") == "object" and isinstance(props, Mapping)
                and not parent.get("x-kubernetes-preserve-unknown-fields")
                and not parent.get("additionalProperties")):
            if name not in props and name not in ("apiVersion", "kind", "metadata"):
                raise CompileError(f"undefined field '{name}'")
            return cast(Mapping[str, Any], props.get(name) or {})
        return None
    return None


def _check_names(tree: lark.Tree[Any], schema: Mapping[str, Any]) -> bool:
    """Upstream's checker in part: every function, variable and ``self`` field is
    declared. Answers whether the expression names ``oldSelf``."""
    bound = {"self", "oldSelf", "ip"}
    for kind, sub in _tokens(tree):
        if kind == "member_dot_arg" and str(sub.children[1]) in MACROS - {"has"}:
            args = sub.children[2] if len(sub.children) > 2 else None
            first = args.children[0] if isinstance(args, lark.Tree) and args.children else None
            var = _ident_of(first)
            if var is None:
                raise CompileError(f"{sub.children[1]}() variable name must be a simple "
                                   "identifier")
            bound.add(var)
    uses_old_self = False
    schemas = {"self": schema, "oldSelf": schema}
    for kind, sub in _tokens(tree):
        if kind == "ident_arg" or kind == "member_dot_arg":
            name = str(sub.children[0] if kind == "ident_arg" else sub.children[1])
            if name not in KNOWN_FUNCTIONS:
                raise CompileError(f"undeclared reference to '{name}' (in container '')")
        elif kind == "ident":
            name = str(sub.children[0])
            if name == "oldSelf":
                uses_old_self = True
            if name not in bound and name not in KNOWN_FUNCTIONS:
                raise CompileError(f"undeclared reference to '{name}' (in container '')")
        elif kind == "member_dot":
            _member_schema(sub, schemas)
    return uses_old_self


def _normalize_field_path(path: str, schema: Mapping[str, Any]) -> str:
    """Upstream's ValidFieldPath: ``.a.b`` or ``.m['key']`` through properties and
    additionalProperties that exist; the field path it names, relative."""
    out = ""
    pos = 0
    here: Mapping[str, Any] = schema
    step = re.compile(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]")
    while pos < len(path):
        m = step.match(path, pos)
        if m is None:
            raise CompileError(f"fieldPath {path!r}: expected [ or . at {path[pos:]!r}")
        pos = m.end()
        name = m.group(1) if m.group(1) is not None else re.sub(r"\\(.)", r"\1", m.group(2))
        props = here.get("properties")
        extra = here.get("additionalProperties")
        if isinstance(props, Mapping):
            if name not in props:
                raise CompileError(f"fieldPath {path!r} does not refer to a valid field")
            here = props[name]
            out = f"{out}.{name}" if out else name
        elif isinstance(extra, Mapping):
            here = extra
            out = f"{out}[{name}]"
        else:
            raise CompileError(f"fieldPath {path!r} does not refer to a valid field")
    return out


def _compile_rule(raw: Mapping[str, Any], schema: Mapping[str, Any],
                  uncorrelatable: str | None, where: str) -> Rule:
    text = raw.get("rule")
    if not isinstance(text, str) or not text.strip():
        raise CompileError(f"{where}.rule: Required value: rule is not specified")
    message = raw.get("message") or ""
    if message and not message.strip():
        raise CompileError(f"{where}.message: Invalid value: {json.dumps(message)}: message "
                           "must be non-empty if specified")
    if _NEWLINES.search(message.strip()):
        raise CompileError(f"{where}.message: Invalid value: {json.dumps(message)}: message "
                           "must not contain line breaks")
    if _NEWLINES.search(text.strip()) and not message.strip():
        raise CompileError(f"{where}.message: Required value: message must be specified if "
                           "rule contains line breaks")
    reason = raw.get("reason")
    if reason is not None and reason not in REASONS:
        raise CompileError(f"{where}.reason: Unsupported value: {json.dumps(reason)}: "
                           f"supported values: {', '.join(json.dumps(r) for r in REASONS)}")
    try:
        tree = _ENV.compile(text)
        uses_old_self = _check_names(tree, schema)
    except (CELParseError, CompileError) as exc:
        raise CompileError(f"{where}.rule: Invalid value: {json.dumps(text)}: compilation "
                           f"failed: {exc}") from None
    optional = bool(raw.get("optionalOldSelf"))
    if optional and not uses_old_self:
        raise CompileError(f"{where}.optionalOldSelf: Invalid value: true: may not be set "
                           "if oldSelf is not used in rule")
    if uses_old_self and uncorrelatable is not None:
        raise CompileError(f"{where}.rule: Invalid value: {json.dumps(text)}: oldSelf "
                           "cannot be used on the uncorrelatable portion of the schema within "
                           f"{uncorrelatable}")
    message_program = None
    expression = raw.get("messageExpression")
    if expression is not None:
        if not isinstance(expression, str) or not expression.strip():
            raise CompileError(f"{where}.messageExpression: Required value: messageExpression "
                               "must be non-empty if specified")
        try:
            mtree = _ENV.compile(expression)
            _check_names(mtree, schema)
        except (CELParseError, CompileError) as exc:
            raise CompileError(f"{where}.messageExpression: Invalid value: "
                               f"{json.dumps(expression)}: messageExpression compilation "
                               f"failed: {exc}") from None
        message_program = _ENV.program(mtree, functions=FUNCTIONS)
    path = raw.get("fieldPath")
    normalized = ""
    if path:
        try:
            normalized = _normalize_field_path(str(path), schema)
        except CompileError as exc:
            raise CompileError(f"{where}.fieldPath: Invalid value: {json.dumps(path)}: "
                               f"fieldPath must be a valid path ({exc})") from None
    return Rule(rule=text, program=_ENV.program(tree, functions=FUNCTIONS), message=message,
                message_program=message_program, field_path=normalized,
                reason=reason, uses_old_self=uses_old_self, optional_old_self=optional)


def compile_schema(schema: Mapping[str, Any], where: str = "openAPIV3Schema",
                   *, root: bool = True, uncorrelatable: str | None = None
                   ) -> Validator | None:
    """The validator of ``schema`` (``None``: no rules anywhere in it).
    ``uncorrelatable``: the schema path under which no old value correlates (the items of
    a list that is not ``x-kubernetes-list-type: map``, an atomic map's entries).
    :raises CompileError: naming the rule (``where`` is its schema path)."""
    rules = tuple(
        _compile_rule(raw, schema, uncorrelatable, f"{where}.x-kubernetes-validations[{i}]")
        for i, raw in enumerate(schema.get("x-kubernetes-validations") or ())
    )
    props: dict[str, Validator] = {}
    inside_map = uncorrelatable
    if inside_map is None and schema.get("x-kubernetes-map-type") == "atomic":
        inside_map = where
    for key, sub in (schema.get("properties") or {}).items():
        found = compile_schema(sub, f"{where}.properties[{key}]", root=False,
                               uncorrelatable=inside_map)
        if found is not None:
            props[key] = found
    items = None
    if isinstance(schema.get("items"), Mapping):
        inside_list = uncorrelatable
        if inside_list is None and schema.get("x-kubernetes-list-type") != "map":
            inside_list = f"{where}.items"
        items = compile_schema(schema["items"], f"{where}.items", root=False,
                               uncorrelatable=inside_list)
    additional = None
    if isinstance(schema.get("additionalProperties"), Mapping):
        additional = compile_schema(schema["additionalProperties"],
                                    f"{where}.additionalProperties", root=False,
                                    uncorrelatable=inside_map)
    if not rules and not props and items is None and additional is None:
        return None
    return Validator(schema, rules, props, items, additional, root)


# --- evaluating ------------------------------------------------------------------------------


def _to_cel(value: Any, schema: Mapping[str, Any] | None, root: bool = False) -> Any:
    """A JSON value as CEL sees it through its schema."""
    schema = schema or {}
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        if schema.get("type") == "number":
            return celtypes.DoubleType(float(value))
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), Mapping) else None
        return celtypes.ListType(_to_cel(v, items) for v in value)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = celtypes.MapType()
        for k, v in value.items():
            if root and k == "metadata" and isinstance(v, dict):
                # only the name fields of metadata are visible to rules at the root
                v = {n: v[n] for n in ("name", "generateName") if n in v}
            sub = props.get(k) if k in props else (extra if isinstance(extra, Mapping) else None)
            out[celtypes.StringType(k)] = _to_cel(v, sub)
        return out
    return value


def _runtime_message(exc: CELEvalError) -> str:
    text = str(exc.args[0]) if exc.args else "error"
    m = re.match(r"no such member in mapping: '(.*)'", text)
    if m:
        return f"no such key: {m.group(1)}"
    if text == "invalid_argument" and len(exc.args) > 2 and exc.args[1] is IndexError:
        return "index out of bounds"
    if text.startswith("found no matching overload") or text.startswith("no such overload"):
        return "no such overload"
    return text


def _invalid(path: str, type_: str, detail: str) -> Violation:
    return Violation(path, "FieldValueInvalid", f"Invalid value: {json.dumps(type_)}: {detail}")


def _reason_error(path: str, type_: str, detail: str, reason: str | None) -> Violation:
    if reason == "FieldValueForbidden":
        return Violation(path, reason, f"Forbidden: {detail}")
    if reason == "FieldValueRequired":
        return Violation(path, reason, f"Required value: {detail}")
    if reason == "FieldValueDuplicate":
        return Violation(path, reason, f"Duplicate value: {json.dumps(type_)}")
    return _invalid(path, type_, detail)


def _run(program: celpy.Runner, activation: dict[str, Any]) -> Any:
    try:
        return program.evaluate(activation)
    except CELEvalError as exc:
        return exc


def _message(rule: Rule, activation: dict[str, Any]) -> str:
    """The failure's detail: messageExpression's string when it makes a usable one."""
    if rule.message_program is not None:
        result = _run(rule.message_program, activation)
        if isinstance(result, str):
            text = str(result).strip()
            if text and "\n" not in text and len(text) <= _MESSAGE_LIMIT:
                return text
        # upstream logs why and falls back to the message
    return rule.default_message


_VERDICTS_MAX: Final = 4096


def _verdict(rule: Rule, node: Validator, value: Any, old: Any) -> tuple[str, str]:
    """``("ok", "")``, ``("error", detail)`` (the rule did not evaluate) or
    ``("fail", detail)``; ``("skip", "")`` for a transition rule without an old value."""
    if rule.uses_old_self and old is None and not rule.optional_old_self:
        return "skip", ""  # a transition rule needs an old value to compare with
    key = (json.dumps(value, sort_keys=True),
           json.dumps(old, sort_keys=True) if rule.uses_old_self else "")
    found = rule.verdicts.get(key)
    if found is not None:
        return found
    activation: dict[str, Any] = {"self": _to_cel(value, node.schema, node.root),
                                  "ip": IP_NAMESPACE}
    if rule.uses_old_self:
        old_value = None if old is None else _to_cel(old, node.schema, node.root)
        activation["oldSelf"] = (Optional(Optional.NONE if old is None else old_value)
                                 if rule.optional_old_self else old_value)
    result = _run(rule.program, activation)
    if isinstance(result, CELEvalError):
        why = _runtime_message(result)
        if why == "no such overload":
            verdict = ("error", "'no such overload': call arguments did not match a supported "
                       f"operator, function or macro signature for rule: {rule.error_string}")
        else:
            verdict = ("error", f"{why} evaluating rule: {rule.error_string}")
    elif isinstance(result, celtypes.BoolType) and bool(result):
        verdict = ("ok", "")
    else:
        verdict = ("fail", _message(rule, activation))
    if len(rule.verdicts) >= _VERDICTS_MAX:
        rule.verdicts.clear()
    rule.verdicts[key] = verdict
    return verdict


def _check_node(v: Validator, value: Any, old: Any, path: str, unchanged: bool,
                out: Outcome) -> None:
    for rule in v.rules:
        kind, detail = _verdict(rule, v, value, old)
        if kind == "error":
            out.errors.append(_invalid(path or "<nil>", v.type, detail))
        elif kind == "fail":
            # a rule at the root without a fieldPath names no field: Go prints a nil path
            where = f"{path}.{rule.field_path}" if rule.field_path and path else (
                rule.field_path or path or "<nil>")
            error = _reason_error(where, v.type, detail, rule.reason)
            if not rule.uses_old_self and unchanged:
                out.warnings.append(str(error))  # ratcheted: the value did not change
            else:
                out.errors.append(error)


def _walk(v: Validator, value: Any, old: Any, path: str, unchanged: bool,
          out: Outcome) -> None:
    if value is None:
        return
    _check_node(v, value, old, path, unchanged, out)
    if isinstance(value, dict):
        olds = old if isinstance(old, dict) else {}
        for key, item in value.items():
            sub = v.properties.get(key)
            where = f"{path}.{key}" if path else key
            if sub is None and v.additional is not None:
                sub, where = v.additional, f"{path}[{key}]"
            if sub is None:
                continue
            was = olds.get(key)
            _walk(sub, item, was, where, _same(item, was), out)
    elif isinstance(value, list) and v.items is not None:
        keys = v.schema.get("x-kubernetes-list-map-keys") or ()
        by_key: dict[str, Any] = {}
        if v.schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
            by_key = {_key_of(o, keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(value):
            was = by_key.get(_key_of(item, keys)) if by_key and isinstance(item, dict) else None
            # an item that does not correlate ratchets with its list
            same = _same(item, was) if was is not None else unchanged
            _walk(v.items, item, was, f"{path}[{i}]", same, out)


def _key_of(item: Mapping[str, Any], keys: Any) -> str:
    return json.dumps([item.get(k) for k in keys])


def _same(value: Any, old: Any) -> bool:
    return old is not None and json_equal(value, old)


def evaluate(validator: Validator | None, new: Mapping[str, Any],
             old: Mapping[str, Any] | None) -> Outcome:
    """Every rule of ``validator`` on ``new`` (``old``: the stored object of an update,
    for transition rules and ratcheting). Errors name the field as upstream does."""
    out = Outcome()
    if validator is None:
        return out
    unchanged = old is not None and json_equal(new, old)
    _walk(validator, new, old, "", unchanged, out)
    return out
