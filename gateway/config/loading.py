"""Reading a YAML config: ${ENV} expanded, route fields merged over `defaults:`, and every
wrong field reported with its path."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from gateway.config.policy import Policy
from gateway.config.server_tls import LOAD_FILES
from gateway.config.settings import Settings
from gateway.errors import ConfigError

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(node: Any, path: str) -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string of the tree."""
    if isinstance(node, dict):
        return {k: _expand_env(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_env(v, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{path}: environment variable {name} is not set")

    return _ENV.sub(substitute, node)


def _merge(defaults: dict[str, Any], route: dict[str, Any]) -> dict[str, Any]:
    """Route fields over defaults; nested tables (timeouts, fingerprint) merge one level deep."""
    merged = dict(defaults)
    for key, value in route.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not str(part).startswith("function-"):
            text += f".{part}" if text else str(part)
    return text


def _describe(error: ValidationError, prefix: tuple[int | str, ...] = ()) -> str:
    lines = []
    for item in error.errors():
        where = _location(prefix + tuple(item["loc"])) or "config"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        elif item["type"] in ("missing",):
            message = "is required"
        elif "input" in item and item["type"] not in ("value_error",):
            message = f"{item['input']!r}: {message}"
        lines.append(f"{where}: {message}")
    return "\n".join(lines)


def settings_from_dict(raw: Any, tls_files: bool = True) -> Settings:
    """Validate a loaded YAML tree; raise ConfigError naming each bad field. `tls_files`:
    load the listeners' certificates to check them (a reload loads them on its own)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("config: expected a mapping at the top level")
    raw = _expand_env(raw, "")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError("defaults: expected a mapping")
    try:
        Policy.model_validate(defaults)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, ("defaults",))) from None
    routes = raw.get("routes") or []
    if not isinstance(routes, list):
        raise ConfigError("routes: expected a list of routes")
    merged = dict(raw)
    merged["routes"] = [
        _merge(defaults, route) if isinstance(route, dict) else route for route in routes
    ]
    try:
        return Settings.model_validate(merged, context={LOAD_FILES: tls_files})
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def load_settings(path: str | Path, tls_files: bool = True) -> Settings:
    """Read, expand and validate a YAML config file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:  # a file saved in Latin-1, or not a config at all
        at = _line_column(data.decode("latin-1"), exc.start)
        raise ConfigError(f"{path}{at}: not UTF-8 (byte 0x{data[exc.start]:02x})") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeys)  # a SafeLoader
    except yaml.reader.ReaderError as exc:  # a control character, e.g. a NUL byte
        why = f"character #x{exc.character:04x} is not allowed"
        raise ConfigError(
            f"{path}{_line_column(text, exc.position)}: not valid YAML: {why}"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}{_where(exc)}: not valid YAML: {_what(exc)}") from None
    except RecursionError:  # PyYAML recurses once per level of nesting
        raise ConfigError(f"{path}: not valid YAML: nested too deeply") from None
    return settings_from_dict(raw, tls_files)


# Flow collections (`[...]`, `{...}`) nested deeper than this are refused as they are read:
# PyYAML's scanner takes time quadratic in their depth (3,000 levels: a second of CPU, in the
# event loop of a gateway that reloads), and no config nests more than a few.
MAX_FLOW_DEPTH: Final = 100


class _UniqueKeys(yaml.SafeLoader):
    """The safe loader, refusing a key given twice in one mapping: PyYAML keeps the last one
    silently, so a second `listen:` or `lease:` further down would win unnoticed; and flow
    collections nested past MAX_FLOW_DEPTH."""

    def fetch_flow_collection_start(self, token_class: type[yaml.Token]) -> None:
        if self.flow_level >= MAX_FLOW_DEPTH:
            raise yaml.scanner.ScannerError(None, None, "nested too deeply", self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the safe loader names it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _line_column(text: str, offset: int) -> str:
    """`:line:column` of the character at `offset` (both counted from 1)."""
    line = text.count("\n", 0, offset) + 1
    column = offset - text.rfind("\n", 0, offset)
    return f":{line}:{column}"


def _where(exc: yaml.YAMLError) -> str:
    """`:line:column` of a YAML error (both counted from 1), when the parser says."""
    mark = getattr(exc, "problem_mark", None)
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""


def _what(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    return " ".join(part for part in (context, problem) if part) or type(exc).__name__


def protects_nothing(settings: Settings) -> str | None:
    """Why a config would start a gateway that protects nothing, or None. A gateway with no
    routes would forward (or refuse) every request without idempotency: almost always a
    mistake, so it takes `pass_through: true` to run one on purpose."""
    if settings.routes:
        return None
    if not settings.pass_through:
        return "no routes: the gateway would protect nothing (add routes, or pass_through: true)"
    if settings.upstream is None:
        return "pass_through without routes or upstream: every request would get 404"
    return None
