"""The config's JSON Schema, for editors (`idem-gateway schema`, shipped as config/schema.json).

It is pydantic's schema of `Settings`, with one addition: wherever the YAML may hold a value
that is not a plain string (a number, a boolean, a choice, a URL), it may also hold a
`${VAR}` or `${VAR:-default}` reference, which the loader expands before validating.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.config.settings import Settings

DIALECT = "https://json-schema.org/draft/2020-12/schema"
ENV_REFERENCE = {
    "type": "string",
    "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}",
    "description": "${VAR} or ${VAR:-default}, expanded from the environment at load time",
}
# Keys that describe a value rather than constrain it: they stay outside the anyOf.
_ANNOTATIONS = ("title", "description", "default", "examples")


def config_schema() -> dict[str, Any]:
    schema = Settings.model_json_schema()
    for model in schema.get("$defs", {}).values():
        _allow_env(model)
    _allow_env(schema)
    schema["$defs"]["EnvReference"] = ENV_REFERENCE
    return {"$schema": DIALECT, **schema, "title": "idem-gateway config"}


def schema_text() -> str:
    """What `idem-gateway schema` prints and config/schema.json holds."""
    return json.dumps(config_schema(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def _allow_env(model: dict[str, Any]) -> None:
    for name, prop in model.get("properties", {}).items():
        model["properties"][name] = _value(prop)


def _value(node: dict[str, Any]) -> dict[str, Any]:
    """`node`, or `node` or an env reference where an env reference would not already fit."""
    if len(node.get("allOf", ())) == 1 and "$ref" in node["allOf"][0]:
        # Older pydantic wraps a $ref with siblings in allOf; 2020-12 allows them side by side.
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **node["allOf"][0]}
    if "$ref" in json.dumps(node):  # a section (a mapping): no env reference makes one
        return node
    if node.get("type") == "array":  # a list: its items may be references, not the list
        items = node.get("items")
        return {**node, "items": _value(items)} if isinstance(items, dict) else node
    choices = node.get("anyOf", [node])
    if any(set(c) - set(_ANNOTATIONS) == {"type"} and c["type"] == "string" for c in choices):
        return node  # a plain string is allowed: a reference already is one
    outer = {key: node[key] for key in _ANNOTATIONS if key in node}
    inner = {key: value for key, value in node.items() if key not in _ANNOTATIONS}
    return {**outer, "anyOf": [_without_defaults(inner), {"$ref": "#/$defs/EnvReference"}]}


def _without_defaults(node: Any) -> Any:
    """A default belongs to the field, not to one of its alternatives (pydantic 2.6 leaks one
    field's default into a shared annotation's schema). A string constant is typed as newer
    pydantic types it (2.6 leaves its type out), so every supported pydantic prints the same."""
    if isinstance(node, list):
        return [_without_defaults(item) for item in node]
    if isinstance(node, dict):
        typed = {"type": "string"} if isinstance(node.get("const"), str) else {}
        return {**typed, **{k: _without_defaults(v) for k, v in node.items() if k != "default"}}
    return node
