"""The docs stay true to the code: docs/configuration.md names every config field and no
other, docs/problems.md every problem type of the catalogue and no other, and every relative
link in README.md, docs/*.md and loadtest/*.md leads to a file (and heading) that exists."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import BaseModel, BeforeValidator, TypeAdapter
from pydantic.fields import FieldInfo

import gateway
from gateway.config.policy import Policy, Route
from gateway.config.settings import Settings
from gateway.http.answers import problems
from gateway.http.answers.problems import Problem

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = Path(gateway.__file__).resolve().parent  # the checkout's, or the installed one


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


def catalogued_problems() -> dict[str, list[Problem]]:
    """The catalogue's entries (gateway/http/answers/problems.py) by slug: a slug answered
    with two statuses (owner-lost) has an entry for each."""
    found: dict[str, list[Problem]] = {}
    for value in vars(problems).values():
        if isinstance(value, Problem):
            found.setdefault(value.slug, []).append(value)
    return found


def documented_problems() -> dict[str, dict[str, str]]:
    """problems.md: one `### slug` section per type, each with `- **field**: value` lines."""
    text = (DOCS / "problems.md").read_text()
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    documented: dict[str, dict[str, str]] = {}
    for section in sections:
        heading, _, body = section.partition("\n")
        slug = heading.strip().strip("`")
        assert slug not in documented, f"{slug} is documented twice"
        documented[slug] = dict(re.findall(r"^- \*\*(\w[\w ]*)\*\*: (.+)$", body, flags=re.M))
    return documented


def test_the_catalogue_holds_problems_of_each_kind() -> None:
    """The catalogue is read whole: a conflict, a bad key, an upstream failure, a problem
    answered with two statuses."""
    found = catalogued_problems()
    assert [p.status for p in found["in-flight"]] == [409]
    assert [p.title for p in found["empty-key"]] == ["Empty idempotency key"]
    assert [p.status for p in found["upstream-timeout"]] == [504]
    assert sorted(p.status for p in found["owner-lost"]) == [409, 502]


def test_problems_md_documents_every_problem_in_the_catalogue_and_no_other() -> None:
    catalogued = catalogued_problems()
    documented = documented_problems()
    missing = sorted(set(catalogued) - set(documented))
    unknown = sorted(set(documented) - set(catalogued))
    assert missing == [], f"problem types missing from docs/problems.md: {missing}"
    assert unknown == [], f"docs/problems.md documents types the catalogue lacks: {unknown}"
    for slug, fields in documented.items():
        entries = catalogued[slug]
        assert fields.get("type") == f"`urn:idem-gateway:problem:{slug}`", slug
        assert fields.get("code") == f"`{slug}`", slug
        statuses = {int(s) for s in re.findall(r"\b[45]\d\d\b", fields.get("status", ""))}
        assert statuses == {p.status for p in entries}, slug
        titles = {t.strip() for t in fields.get("title", "").split(" / ")}
        assert titles == {p.title for p in entries}, slug
        says_retry = any("Retry-After" in value for value in fields.values())
        assert says_retry == any(p.retry_after is not None for p in entries), slug
        for needed in ("when", "client"):
            assert fields.get(needed), f"{slug}: says nothing under {needed}"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings in code
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        anchor = github_anchor(heading)
        n = 1
        while anchor in found:  # a repeated heading gets -1, -2, ...
            anchor = f"{github_anchor(heading)}-{n}"
            n += 1
        found.add(anchor)
    return found


def relative_links() -> list[tuple[Path, str]]:
    links = []
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(ROOT.glob("loadtest/*.md"))]
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"[a-z]+:", target):
                links.append((page, target))
    return links


def test_every_relative_link_leads_to_a_file_and_heading_that_exist() -> None:
    links = relative_links()
    assert len(links) > 20  # README and docs link to each other
    broken = []
    for page, target in links:
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if not path.exists():
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_github_anchors_are_computed_as_github_does() -> None:
    assert github_anchor("Durability across a failover: `claim_replicas`") == (
        "durability-across-a-failover-claim_replicas"
    )
    assert github_anchor("Several processes on one port: `--workers N`") == (
        "several-processes-on-one-port---workers-n"
    )
