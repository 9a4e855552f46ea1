"""The kopf handlers: parse the object, call the stream service, report.

Only these functions raise kopf's errors; everything below them raises typed
`UpdateStreamError`s. The service writes UpdateStream status itself, inside its per-stream
lock (see `service.py`); the Keyspace handler returns its status through kopf's `patch`.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import time
from typing import Any

import kopf

from updatestream.core.errors import UpdateStreamError
from updatestream.spec import API_GROUP, SpecError, parse_keyspace, parse_update_stream
from updatestream_operator import config, metrics_book, scrub
from updatestream_operator.admission import KEYSPACES, STREAMS, no_webhook_server
from updatestream_operator.kopfext import ScrubbingProgressStorage, connection_info
from updatestream_operator.reconciler.models import StreamRef
from updatestream_operator.reconciler.spec_checks import keyspace_status, not_ready_status
from updatestream_operator.service import StreamService
from updatestream_operator.storage import KubeStore
from updatestream_operator.vitess_sync import VitessSync

FINALIZER = f"{API_GROUP}/finalizer"
TICK_SECONDS = 2.0  # the timer's tick; each stream is folded every config.timer_interval

log = logging.getLogger(__name__)


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    cfg = config.current()
    # Secret values never reach a log line, an Event or kopf's progress annotations.
    scrub.install()
    # Our own finalizer: deletion waits for our cleanup, not for any kopf operator's marker.
    settings.persistence.finalizer = FINALIZER
    # Handler progress in annotations under our group: status holds only our own fields.
    settings.persistence.progress_storage = ScrubbingProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    # Only warnings and errors become Events: the service posts the meaningful ones itself.
    settings.posting.level = logging.WARNING
    # One replica (the chart uses Recreate): no peering objects to install or watch.
    settings.peering.standalone = True
    # One namespace (--namespace) or all of them: kopf watches what the CLI passed it.
    settings.peering.clusterwide = cfg.namespace is None
    # The two resources are known: no CRD watch, hence no CRD read permission needed.
    settings.scanning.disabled = True
    # Handlers are sync (spark-submit blocks for seconds): enough threads for a few streams.
    settings.execution.max_workers = 8
    # A deleted Keyspace waits for a timer caught mid-call: checked every second, not minute.
    settings.background.cancellation_polling = 1.0
    # The validating webhook (admission.py): served over TLS, registered by the chart.
    settings.admission.managed = None
    settings.admission.server = _webhook_server(cfg.webhook)
    store = KubeStore.connect(cfg.kubeconfig)
    # kopf starts watching after this handler: not while the CRDs' storage initialises
    store.wait_until_served(cfg.namespace)
    book = metrics_book.MetricsBook()
    memo.service = StreamService(
        store,
        config.build_launchers(cfg, store),
        cfg.default_launcher,
        book,
        max_restarts=cfg.max_restarts,
        in_job_hops=cfg.in_job_hops,
        in_job_hop_timeout=cfg.in_job_hop_timeout,
    )
    memo.interval = cfg.timer_interval
    memo.last_fold = {}
    memo.vitess = VitessSync(store)
    memo.stop_metrics = (
        metrics_book.serve(book, cfg.metrics_port, cfg.metrics_address)
        if (cfg.metrics_port)
        else None
    )
    log.info(
        "watching %s with the %s launcher by default",
        f"namespace {cfg.namespace}" if cfg.namespace else "every namespace",
        cfg.default_launcher,
    )


def _webhook_server(webhook: config.WebhookSettings | None) -> Any:
    if webhook is None:
        return no_webhook_server
    return kopf.WebhookServer(
        addr=webhook.address,
        port=webhook.port,
        certfile=str(webhook.cert_file),
        pkeyfile=str(webhook.key_file),
    )


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf authenticates exactly as the operator's own client (and spark-submit) does."""
    try:
        return connection_info(config.current().kubeconfig)
    except Exception as exc:
        raise kopf.LoginError(scrub.SCRUBBER.scrub(f"cannot authenticate: {exc}")) from None


@kopf.on.probe(id="webhook", errors=kopf.ErrorsMode.PERMANENT)
def webhook_listening(**_: Any) -> str:
    """Ready means admission works: the health endpoint fails until the webhook accepts TLS
    connections (kopf starts its server after the health endpoint), and fails if it stops."""
    webhook = config.current().webhook
    if webhook is None:
        return "off"
    host = "127.0.0.1" if webhook.address in ("0.0.0.0", "") else webhook.address
    try:
        socket.create_connection((host, webhook.port), timeout=2).close()
    except OSError as exc:
        raise kopf.PermanentError(
            f"the admission webhook is not listening on {host}:{webhook.port}: {exc}"
        ) from None
    return "listening"


@kopf.on.cleanup()
def shutdown(memo: Any, **_: Any) -> None:
    if memo.get("stop_metrics"):
        memo.stop_metrics()


def _failed(memo: Any, exc: Exception, delay: float = 15) -> kopf.TemporaryError:
    memo.service.metrics.count_error()
    return kopf.TemporaryError(scrub.SCRUBBER.scrub(str(exc)), delay=delay)


@kopf.on.resume(*STREAMS)
@kopf.on.create(*STREAMS)
@kopf.on.update(*STREAMS, field="spec")
def reconcile_stream(
    body: kopf.Body, name: str, namespace: str | None, memo: Any, **_: Any
) -> None:
    namespace = namespace or "default"
    try:
        parse_update_stream(dict(body), source=f"UpdateStream {namespace}/{name}")
    except SpecError as exc:
        memo.service.metrics.count_error()
        raise kopf.PermanentError(scrub.SCRUBBER.scrub(str(exc))) from None
    try:
        memo.service.reconcile(namespace, name)
    except Exception as exc:
        raise _failed(memo, exc) from None


@kopf.timer(*STREAMS, interval=TICK_SECONDS, initial_delay=TICK_SECONDS)
def refresh_stream(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    namespace = namespace or "default"
    key = (namespace, name)
    if time.monotonic() - memo.last_fold.get(key, 0.0) < memo.interval:
        return
    memo.last_fold[key] = time.monotonic()
    try:
        memo.service.reconcile(namespace, name)
    except Exception as exc:
        raise _failed(memo, exc, delay=memo.interval) from None


@kopf.on.delete(*STREAMS)
def stop_stream(name: str, namespace: str | None, uid: str, memo: Any, **_: Any) -> None:
    namespace = namespace or "default"
    try:
        done = memo.service.cleanup(namespace, name, uid)
    except Exception as exc:
        raise _failed(memo, exc, delay=5) from None
    memo.last_fold.pop((namespace, name), None)
    if not done:
        raise kopf.TemporaryError("jobs are still terminating; checking again", delay=5)


@kopf.on.resume(*KEYSPACES)
@kopf.on.create(*KEYSPACES)
@kopf.on.update(*KEYSPACES, field="spec")
def keyspace_changed(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: Any,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    namespace = namespace or "default"
    generation = int(body.get("metadata", {}).get("generation", 0))
    now = dt.datetime.now(dt.UTC)
    try:
        keyspace = parse_keyspace(dict(body), source=f"Keyspace {namespace}/{name}")
    except SpecError as exc:
        message = scrub.SCRUBBER.scrub(str(exc))
        patch.status.update(
            not_ready_status("InvalidSpec", message, body.get("status"), now, generation)
        )
        logger.warning(message)  # an Event on the Keyspace (settings.posting.level)
        return
    patch.status.update(keyspace_status(keyspace, body.get("status"), now, generation))
    failures = []
    for stream in memo.service.streams_of_keyspace(namespace, name):
        try:
            memo.service.reconcile(namespace, stream)
        except UpdateStreamError as exc:
            failures.append(f"{stream}: {exc}")
    if failures:
        raise _failed(memo, UpdateStreamError("; ".join(failures)))


def _names_vitess(spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("vitess"))


@kopf.timer(*KEYSPACES, interval=TICK_SECONDS, initial_delay=0.0, when=_names_vitess)
def follow_vitess(
    body: kopf.Body, name: str, namespace: str | None, uid: str, memo: Any, **_: Any
) -> None:
    """A Keyspace naming a Vitess cluster takes its shards, serving shards and VSchema from
    it, read every `spec.vitess.syncSeconds` (`vitess_sync.py`, which posts the Events)."""
    namespace = namespace or "default"
    try:
        keyspace = parse_keyspace(dict(body), source=f"Keyspace {namespace}/{name}")
    except SpecError:
        return  # keyspace_changed reports it in the status
    version = str(body.get("metadata", {}).get("resourceVersion", ""))
    try:
        memo.vitess.follow(StreamRef(namespace, name, uid), keyspace, version)
    except UpdateStreamError:
        memo.service.metrics.count_error()  # the Warning Event says what failed
