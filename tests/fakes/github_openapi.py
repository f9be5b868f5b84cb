"""GitHub's official REST API description, as a request and response checker.

The description is the npm package ``@octokit/openapi`` (OpenAPI 3.0.3), fetched
into a cache by ``bin/fetch-github-openapi``; ``$CEASELESS_GITHUB_OPENAPI`` names
another copy. The fake forge (``tests/fakes/forge.py``) checks every GitHub-side
request with :meth:`Description.check_request`, so a client bug cannot hide behind
a lenient fake; it checks its own answers with :meth:`Description.check_response`.

What a caller can rely on:
- an operation is found by method and path template, never by guessing: a path
  that matches no template, or a method the template does not have, is refused;
- path and query parameters are coerced from their text as the schema's type
  says (integer, number, boolean, string) and then validated; a query parameter
  the operation does not declare is refused;
- a JSON body is validated against the operation's ``requestBody`` schema with
  every ``$ref`` resolved; a required body that is missing is refused;
- OpenAPI 3.0's ``nullable: true`` admits ``null``; ``format`` is not checked
  (GitHub's own formats, such as ``repo.nwo``, have no checker).
A missing description raises :class:`DescriptionMissing` naming the command
that fetches it: the tests fail loudly rather than skip.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator, validators
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


class DescriptionMissing(RuntimeError):
    """The description file is not there; run bin/fetch-github-openapi."""


def description_path() -> Path:
    """Where the description is: $CEASELESS_GITHUB_OPENAPI, else the user cache."""
    explicit = os.environ.get("CEASELESS_GITHUB_OPENAPI")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "ceaseless" / "github-openapi" / "api.github.com.json"


def _nullable(keyword: str, base: Any) -> Any:
    """Wrap a keyword so that ``null`` passes where the schema says nullable."""

    def check(validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
        if instance is None and schema.get("nullable") is True:
            return
        yield from base(validator, value, instance, schema)

    check.__name__ = f"nullable_{keyword}"
    return check


# OpenAPI 3.0 schemas are draft-4 schemas (boolean exclusiveMinimum included)
# plus ``nullable``, which draft 4 does not know.
_OpenAPI30Validator = validators.extend(
    Draft4Validator,
    {
        keyword: _nullable(keyword, Draft4Validator.VALIDATORS[keyword])
        for keyword in ("type", "enum", "oneOf", "anyOf", "allOf", "format")
    },
)


def _ignore_required(*_: Any) -> Iterator[ValidationError]:
    yield from ()


# For the fake's own answers: every field present must be what the description
# says, but the fake may leave out fields no client reads.
_PartialValidator = validators.extend(_OpenAPI30Validator, {"required": _ignore_required})


@dataclass(frozen=True)
class Operation:
    """One operation of the description: method, path template, its object."""

    method: str
    template: str
    spec: Mapping[str, Any]
    pattern: re.Pattern[str]


def _template_pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    regex = "".join(
        f"(?P<{p[1:-1].replace('-', '_')}>[^/]+)" if p.startswith("{") else re.escape(p)
        for p in parts
    )
    return re.compile(f"^{regex}$")


class Description:
    """The loaded and indexed description; load it once per test process (it is 13 MB)."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.version = str(document.get("info", {}).get("version", ""))
        resource = Resource.from_contents(document, default_specification=DRAFT4)
        # Refs in the description are "#/components/...", relative to the root:
        # register the whole document under the empty base URI.
        self._registry: Registry = Registry().with_resource("", resource)
        self._root = _OpenAPI30Validator(document, registry=self._registry)
        self._partial_root = _PartialValidator(document, registry=self._registry)
        self._by_method: dict[str, list[Operation]] = {}
        for template, item in document["paths"].items():
            pattern = _template_pattern(template)
            for method in _METHODS:
                if method in item:
                    op = Operation(method.upper(), template, item[method], pattern)
                    self._by_method.setdefault(op.method, []).append(op)
        # A literal segment beats a parameter ("/issues/comments" before
        # "/issues/{issue_number}"), as a router would order them.
        for ops in self._by_method.values():
            ops.sort(key=lambda o: (o.template.count("{"), -len(o.template)))

    @classmethod
    def load(cls, path: Path | None = None) -> Description:
        path = path or description_path()
        if not path.is_file():
            raise DescriptionMissing(
                f"GitHub's API description is not at {path}; run bin/fetch-github-openapi "
                "(or point CEASELESS_GITHUB_OPENAPI at a copy of api.github.com.json)"
            )
        with path.open(encoding="utf-8") as f:
            return cls(json.load(f))

    def _resolve(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in obj:
            obj = self._registry.resolver().lookup(obj["$ref"]).contents
        return obj

    def operation(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        """The operation a request reaches, with its path parameters; None if none."""
        for op in self._by_method.get(method.upper(), []):
            match = op.pattern.match(path)
            if match:
                names = re.findall(r"\{([^}]+)\}", op.template)
                return op, {n: match.group(n.replace("-", "_")) for n in names}
        return None

    def parameters(self, op: Operation) -> list[Mapping[str, Any]]:
        return [self._resolve(p) for p in op.spec.get("parameters", [])]

    def _errors(self, schema: Mapping[str, Any], value: Any, partial: bool = False) -> list[str]:
        # The root validator holds the whole document, so "#/components/..."
        # refs inside any of its parts resolve; evolve keeps that resolver.
        root = self._partial_root if partial else self._root
        validator = root.evolve(schema=schema)
        return [
            f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}".lstrip(": ")
            for e in validator.iter_errors(value)
        ]

    def check_request(
        self,
        method: str,
        path: str,
        query: Mapping[str, list[str]],
        body: bytes | None,
        content_type: str | None,
    ) -> list[str]:
        """Every reason the request breaks the description; empty when it is valid."""
        found = self.operation(method, path)
        if found is None:
            return [f"no operation {method.upper()} {path} in the description"]
        op, path_values = found
        reasons: list[str] = []
        declared = {(p["in"], p["name"]): p for p in self.parameters(op)}
        for name, text in path_values.items():
            param = declared.get(("path", name))
            if param is None:
                reasons.append(f"path parameter {name} is not declared for {op.template}")
                continue
            reasons += self._parameter_errors(param, [text])
        for name, values in query.items():
            param = declared.get(("query", name))
            if param is None:
                reasons.append(f"query parameter {name!r} is not declared for {op.template}")
                continue
            reasons += self._parameter_errors(param, values)
        for (where, name), param in declared.items():
            if where == "query" and param.get("required") and name not in query:
                reasons.append(f"required query parameter {name!r} is missing")
        reasons += self._body_errors(op, body, content_type)
        return [f"{method.upper()} {op.template}: {r}" for r in reasons]

    def _parameter_errors(self, param: Mapping[str, Any], values: list[str]) -> list[str]:
        schema = self._resolve(param.get("schema", {}))
        if len(values) > 1 and schema.get("type") != "array":
            return [f"parameter {param['name']!r} given {len(values)} times"]
        value: Any = values if schema.get("type") == "array" else values[0]
        try:
            value = _coerce(schema, value)
        except ValueError as e:
            return [f"parameter {param['name']!r}: {e}"]
        return [f"parameter {param['name']!r}: {e}" for e in self._errors(schema, value)]

    def _body_errors(
        self, op: Operation, body: bytes | None, content_type: str | None
    ) -> list[str]:
        request_body = op.spec.get("requestBody")
        if request_body is None:
            return ["a body was sent to an operation that takes none"] if body else []
        request_body = self._resolve(request_body)
        if not body:
            return ["the required request body is missing"] if request_body.get("required") else []
        media = (content_type or "").split(";")[0].strip()
        content = request_body.get("content", {})
        if media != "application/json" or media not in content:
            return [f"content type {media!r} is not one of {sorted(content)}"]
        try:
            document = json.loads(body)
        except ValueError as e:
            return [f"the body is not JSON: {e}"]
        schema = content[media].get("schema", {})
        return [f"body {e}" for e in self._errors(schema, document)]

    def check_response(self, op: Operation, status: int, document: Any) -> list[str]:
        """Reasons an answer of the fake breaks the description (fields it sends only)."""
        responses = op.spec.get("responses", {})
        response = responses.get(str(status))
        if response is None:
            return [f"status {status} is not a documented answer of {op.method} {op.template}"]
        response = self._resolve(response)
        content = response.get("content", {}).get("application/json")
        if content is None or document is None:
            return []
        return [
            f"{op.method} {op.template} {status}: {e}"
            for e in self._errors(content.get("schema", {}), document, partial=True)
        ]


def _coerce(schema: Mapping[str, Any], value: Any) -> Any:
    """Read a parameter's text as its schema's type, as a server would."""
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items", {})
        parts = value if len(value) > 1 else value[0].split(",")
        return [_coerce(items, part) for part in parts]
    if kind == "integer":
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an integer") from None
    if kind == "number":
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
    if kind == "boolean":
        if value not in ("true", "false"):
            raise ValueError(f"{value!r} is not true or false")
        return value == "true"
    return value
