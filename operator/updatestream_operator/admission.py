"""The validating admission webhook: the API server asks before it stores an object.

Each handler runs the checks the reconcile runs (`updatestream.validation`, after the pydantic
spec models) and refuses with their message, so an object the operator would report as not
Ready or Degraded is refused at `kubectl apply` instead. An UpdateStream is also checked
against its Keyspace when that exists (its tables, an unsharded keyspace's one range).

An update that leaves `spec` as it was is always admitted: finalizers, kopf's annotations and
labels must stay writable on an object stored before these checks existed (or while the
operator was down), or it could never be deleted.

The chart registers the handlers' paths (`/<handler id>`) in its
ValidatingWebhookConfiguration; `--webhook-port` makes the operator serve them over TLS.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import kopf

from updatestream.spec import API_GROUP, Keyspace, SpecError, parse_keyspace, parse_update_stream
from updatestream.validation import check_keyspace, check_update_stream, keyspace_problems
from updatestream_operator import scrub
from updatestream_operator.storage import VERSION

STREAMS = (API_GROUP, VERSION, "updatestreams")
KEYSPACES = (API_GROUP, VERSION, "keyspaces")
log = logging.getLogger(__name__)

KEYSPACE_WEBHOOK = "validate-keyspace"
STREAM_WEBHOOK = "validate-updatestream"


def keyspace_refusal(data: Mapping[str, Any], source: str) -> str | None:
    """Why a Keyspace must be refused, or None to admit it. One naming a Vitess cluster whose
    shards the operator has not read yet is admitted: the operator fills them in."""
    try:
        keyspace = parse_keyspace(_spec_part(data), source=source)
        if not keyspace.spec.awaiting_vitess:
            check_keyspace(keyspace, source=source)
    except SpecError as exc:
        return str(exc)
    return None


def stream_refusal(
    data: Mapping[str, Any], source: str, keyspace: Mapping[str, Any] | None
) -> str | None:
    """Why an UpdateStream must be refused, or None; `keyspace` is its Keyspace if it exists."""
    try:
        stream = parse_update_stream(_spec_part(data), source=source)
        check_update_stream(stream, _usable(keyspace), source=source)
    except SpecError as exc:
        return str(exc)
    return None


def _spec_part(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: data[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in data}


def _usable(raw: Mapping[str, Any] | None) -> Keyspace | None:
    """The Keyspace to check a stream against; an invalid one is its own object's problem."""
    if raw is None:
        return None
    try:
        keyspace = parse_keyspace(_spec_part(raw))
    except SpecError:
        return None
    return None if keyspace_problems(keyspace) else keyspace


def _spec_unchanged(body: kopf.Body, old: kopf.Body | None) -> bool:
    if body.get("metadata", {}).get("deletionTimestamp"):
        return True
    return old is not None and old.get("spec") == body.get("spec")


def _source(kind: str, name: str | None, namespace: str | None) -> str:
    return f"{kind} {namespace or 'default'}/{name or '(generated name)'}"


def _refuse(message: str) -> kopf.AdmissionError:
    return kopf.AdmissionError(scrub.SCRUBBER.scrub(message), code=422)


@kopf.on.validate(*KEYSPACES, id=KEYSPACE_WEBHOOK, operations=["CREATE", "UPDATE"])
def admit_keyspace(body: kopf.Body, name: str, namespace: str | None, **kwargs: Any) -> None:
    if _spec_unchanged(body, kwargs.get("old")):
        return
    refusal = keyspace_refusal(dict(body), _source("Keyspace", name, namespace))
    if refusal is not None:
        raise _refuse(refusal)


@kopf.on.validate(*STREAMS, id=STREAM_WEBHOOK, operations=["CREATE", "UPDATE"])
def admit_stream(
    body: kopf.Body, name: str, namespace: str | None, memo: Any, **kwargs: Any
) -> None:
    if _spec_unchanged(body, kwargs.get("old")):
        return
    keyspace = None
    keyspace_name = (body.get("spec") or {}).get("keyspace")
    if isinstance(keyspace_name, str) and keyspace_name:
        try:
            keyspace = memo.service.store.get_keyspace(namespace or "default", keyspace_name)
        except Exception as exc:  # unreadable: the reconcile checks against it later
            log.warning("cannot read Keyspace %s to check a stream against: %s", keyspace_name, exc)
    refusal = stream_refusal(dict(body), _source("UpdateStream", name, namespace), keyspace)
    if refusal is not None:
        raise _refuse(refusal)


async def no_webhook_server(fn: Any) -> AsyncIterator[Any]:
    """Stands in for kopf's webhook server when the webhook is off: never listens.

    kopf refuses to start with admission handlers and no server; the handlers are registered
    whenever this module is imported, so an operator without `--webhook-port` uses this.
    """
    import asyncio

    await asyncio.Event().wait()
    yield None  # pragma: no cover - never reached
