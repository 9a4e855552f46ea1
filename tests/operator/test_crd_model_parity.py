"""Every field of the spec models is in the CRDs' schemas.

The API server prunes fields its schema does not declare, silently: a field the pydantic model
(`updatestream.spec`) reads but the CRD lacks reaches the job as its default. This walks both
trees side by side (by alias) and fails on any model field, or any value of a model `Literal`,
the CRD does not accept.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.spec import Keyspace, StartPosition, UpdateStream

REPO_ROOT = Path(__file__).resolve().parents[2]

# Written by the operator into the job's own copy of the stream (a hop's mixed start), never by
# users: the CRD deliberately refuses them.
OPERATOR_ONLY: dict[type[BaseModel], set[str]] = {StartPosition: {"timestamps"}}
OPERATOR_ONLY_VALUES = {"spec.start.mode": {"resume"}}
# Served by the API server itself for every kind, or free-form in the model.
IMPLICIT_TOP_LEVEL = {"apiVersion", "kind", "metadata"}
SCALARS: dict[Any, set[str]] = {
    str: {"string"},
    # typed values that the spec writes as text (`-80`, `-80,80-`)
    KeyRange: {"string"},
    ShardMap: {"string"},
    int: {"integer"},
    float: {"number", "integer"},
    bool: {"boolean"},
}


def _schema(kind_plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO_ROOT / "crds" / f"{kind_plural}.updatestream.io.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _strip_optional(annotation: Any) -> list[Any]:
    """The alternatives of a union (`X | None` gives [X]); [annotation] for anything else."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _strip_optional(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _mismatches(annotation: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """What `annotation` (a model field's type) allows that `schema` (the CRD's) lacks."""
    if annotation is Any or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    alternatives = _strip_optional(annotation)
    models = [a for a in alternatives if isinstance(a, type) and issubclass(a, BaseModel)]
    if models:  # one model, or a discriminated union of them: one CRD object holds them all
        yield from _model_mismatches(models, schema, path)
        return
    for alt in alternatives:
        origin, args = typing.get_origin(alt), typing.get_args(alt)
        if alt in SCALARS:
            if schema.get("type") not in SCALARS[alt]:
                yield f"{path}: {alt.__name__} in the model, {schema.get('type')} in the CRD"
        elif isinstance(alt, type) and alt.__module__.startswith("updatestream"):
            yield f"{path}: {alt.__name__} in the model, with no known CRD type (add it above)"
        elif origin is typing.Literal:
            allowed = set(schema.get("enum", args)) | OPERATOR_ONLY_VALUES.get(path, set())
            missing = set(args) - allowed
            if missing:
                yield f"{path}: values {sorted(missing)} not in the CRD's enum"
        elif origin is list:
            if schema.get("type") != "array" or "items" not in schema:
                yield f"{path}: a list in the model, {schema.get('type')} in the CRD"
            else:
                yield from _mismatches(args[0], schema["items"], f"{path}[]")
        elif origin is dict:
            extra = schema.get("additionalProperties")
            if schema.get("type") != "object" or not isinstance(extra, dict):
                yield f"{path}: a map in the model, not a map (additionalProperties) in the CRD"
            else:
                yield from _mismatches(args[1], extra, f"{path}.*")


def _model_mismatches(
    models: list[type[BaseModel]], schema: dict[str, Any], path: str
) -> Iterator[str]:
    if schema.get("type") != "object":
        yield f"{path}: an object in the model, {schema.get('type')} in the CRD"
        return
    properties = schema.get("properties", {})
    for model in models:
        for name, field in model.model_fields.items():
            key = field.alias or name
            if key in OPERATOR_ONLY.get(model, set()):
                continue
            if path == "" and key in IMPLICIT_TOP_LEVEL:
                continue
            where = f"{path}.{key}" if path else key
            if key not in properties:
                yield f"{where} ({model.__name__}.{name}) is missing from the CRD: it is pruned"
                continue
            yield from _mismatches(field.annotation, properties[key], where)


@pytest.mark.parametrize(
    ("model", "plural"), [(Keyspace, "keyspaces"), (UpdateStream, "updatestreams")]
)
def test_the_crd_declares_every_field_of_the_model(model: type[BaseModel], plural: str) -> None:
    problems = list(_model_mismatches([model], _schema(plural), ""))
    assert not problems, "\n".join(problems)


def test_the_walker_notices_a_missing_field() -> None:
    schema = _schema("updatestreams")
    sink = schema["properties"]["spec"]["properties"]["sinks"]["items"]
    del sink["properties"]["extraKeys"]
    del schema["properties"]["spec"]["properties"]["start"]["properties"]["mode"]["enum"][-1]
    problems = list(_model_mismatches([UpdateStream], schema, ""))
    assert any(p.startswith("spec.sinks[].extraKeys ") for p in problems), problems
    assert any(p.startswith("spec.start.mode: values ['tokens']") for p in problems), problems
