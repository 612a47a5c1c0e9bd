"""The docs stay true to the code: docs/configuration.md names every config field and no
other, docs/problems.md every problem type the gateway emits and no other, and every relative
link in README.md and docs/*.md leads to a file (and heading) that exists."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import BaseModel, BeforeValidator, TypeAdapter
from pydantic.fields import FieldInfo

from gateway.config.policy import Policy, Route
from gateway.config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _is_sequence(annotation: object) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_sequence(arg) for arg in typing.get_args(annotation))
    return origin in (tuple, list)


def _written_as_a_section(info: FieldInfo) -> bool:
    """A model field the YAML writes as a mapping of its own fields. A field whose input is
    turned into the model by a validator first (`record: [2xx, ...]`) is one value."""
    return not any(isinstance(m, BeforeValidator) for m in info.metadata)


def field_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every field as configuration.md names it: `redis.tls.ca`, `routes[].timeouts.read`.
    `defaults` holds the route fields; they are documented once, as `routes[].*`."""
    for name, info in model.model_fields.items():
        path = prefix + name
        yield path
        if model is Settings and name == "defaults":
            continue
        for sub in _models_in(info.annotation):
            if _written_as_a_section(info):
                inner = path + ("[]" if _is_sequence(info.annotation) else "")
                yield from field_paths(sub, inner + ".")


def documented_fields() -> list[str]:
    """The first cell of every table row of configuration.md that names a field."""
    text = (DOCS / "configuration.md").read_text()
    return re.findall(r"^\| `([a-z_\[\].]+)` \|", text, flags=re.M)


def test_defaults_hold_exactly_the_route_fields_but_where_a_route_goes() -> None:
    route_only = set(Route.model_fields) - set(Policy.model_fields)
    assert route_only == {"name", "path_prefix", "upstream"}  # configuration.md says so


def test_configuration_md_documents_every_field_once_and_no_other() -> None:
    fields = set(field_paths(Settings))
    documented = documented_fields()
    missing = sorted(fields - set(documented))
    unknown = sorted(set(documented) - fields)
    twice = sorted({f for f in documented if documented.count(f) > 1})
    assert missing == [], f"fields missing from docs/configuration.md: {missing}"
    assert unknown == [], f"docs/configuration.md names fields that do not exist: {unknown}"
    assert twice == [], f"documented twice: {twice}"


def _field(path: str) -> FieldInfo:
    model: type[BaseModel] = Settings
    *sections, name = path.replace("[]", "").split(".")
    for section in sections:
        (model,) = _models_in(model.model_fields[section].annotation)
    return model.model_fields[name]


def test_configuration_md_states_each_default_as_the_model_has_it() -> None:
    """The default column: a literal (read as the YAML would be) equal to the model's default,
    `none` for None, `required` for a field without one; sections and computed defaults
    (state_dir, blob.url) are described in words."""
    text = (DOCS / "configuration.md").read_text()
    rows = re.findall(r"^\| `([a-z_\[\].]+)` \| ([^|]*) \|", text, flags=re.M)
    checked = 0
    for path, cell in rows:
        info = _field(path)
        literal = re.fullmatch(r"`([^`]+)`", cell.strip())
        if cell.strip() == "required":
            assert info.is_required(), path
        elif cell.strip() == "none":
            assert info.default is None, path
        elif literal:
            kind = info.annotation
            adapter = TypeAdapter(typing.Annotated[kind, *info.metadata] if info.metadata else kind)
            written = adapter.validate_python(yaml.safe_load(literal.group(1)))
            assert written == info.get_default(call_default_factory=True), path
            checked += 1
        else:
            assert info.default_factory is not None or _models_in(info.annotation), (
                f"{path}: the default {cell.strip()!r} is neither a literal, none nor required"
            )
    assert checked >= 45  # most fields have a literal default
