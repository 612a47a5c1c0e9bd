"""Request fingerprints: same key with another payload must be told apart (422)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

_NO_FINGERPRINT = "-"


class Spec(Protocol):
    """What a route says identifies a payload (the config's `fingerprint:`)."""

    @property
    def mode(self) -> str: ...  # "body", "json" or "none"
    @property
    def headers(self) -> tuple[str, ...]: ...
    @property
    def ignore(self) -> tuple[str, ...]: ...  # JSON Pointers left out in json mode


def _without(document: Any, pointer: str) -> None:
    """Remove the member a JSON Pointer (RFC 6901) names, if it is there."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return
    last = tokens[-1] if tokens else None
    if isinstance(node, dict) and last is not None:
        node.pop(last, None)
    elif isinstance(node, list) and last is not None and last.isdigit() and int(last) < len(node):
        del node[int(last)]


def _canonical_json(body: bytes, ignore: tuple[str, ...]) -> bytes:
    """Key order and white space do not matter; a body that is not JSON counts as bytes."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    for pointer in ignore:
        _without(document, pointer)
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def fingerprint(
    spec: Spec,
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
) -> str:
    """SHA-256 over method, path, query, the configured headers and the body."""
    if spec.mode == "none":
        return _NO_FINGERPRINT
    h = hashlib.sha256()
    payload = _canonical_json(body, spec.ignore) if spec.mode == "json" else body
    texts = [method, path, query] + [f"{n.lower()}:{headers.get(n, '')}" for n in spec.headers]
    for part in [*(t.encode("utf-8", "surrogateescape") for t in texts), payload]:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()
