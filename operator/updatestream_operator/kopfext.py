"""kopf extensions: a progress storage that never writes a Secret value into an object, and
kopf's credentials taken from the operator's own Kubernetes client configuration."""

from __future__ import annotations

from typing import Any

import kopf

from updatestream_operator.scrub import SCRUBBER
from updatestream_operator.storage import load_client_configuration


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
