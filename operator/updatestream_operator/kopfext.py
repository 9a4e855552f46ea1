"""kopf extensions: a progress storage that never writes a Secret value into an object, kopf's
credentials taken from the operator's own Kubernetes client configuration, and kopf's routine
successes kept out of the log."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from updatestream_operator.scrub import SCRUBBER
from updatestream_operator.storage import load_client_configuration

# Lines kopf logs at INFO on every tick of a timer or every health probe: they would bury the
# operator's own lines (one every few seconds per stream). At debug level (--verbose) they stay.
ROUTINE = ("Timer 'refresh_stream' succeeded.", "Activity 'webhook' succeeded.")


class _Routine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.INFO or record.getMessage() not in ROUTINE


def quiet_logging(verbose: bool) -> None:
    """After `kopf.configure`: without `verbose`, drop kopf's routine success lines and the
    health endpoint's access log."""
    if verbose:
        return
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Routine())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class ScrubbingProgressStorage(kopf.AnnotationsProgressStorage):
    """Annotations progress storage whose records' messages (handler errors) are scrubbed."""

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        if record.get("message"):
            record = {**record, "message": SCRUBBER.scrub(str(record["message"]))}
        super().store(key=key, record=record, body=body, patch=patch)


def connection_info(kubeconfig: str | None = None) -> kopf.ConnectionInfo:
    """The operator's credentials (those its Kubernetes client uses) as kopf's."""
    c = load_client_configuration(kubeconfig)
    header = str(c.api_key.get("BearerToken") or c.api_key.get("authorization") or "")
    scheme, _, token = header.partition(" ")
    return kopf.ConnectionInfo(
        server=str(c.host),
        ca_path=c.ssl_ca_cert or None,
        insecure=not c.verify_ssl,
        certificate_path=c.cert_file or None,
        private_key_path=c.key_file or None,
        scheme=scheme or None,
        token=token or None,
    )
