"""The storage/adapter layer: everything the operator reads from or writes to Kubernetes.

A thin wrapper over the official `kubernetes` client, so that the service and the launchers
speak in objects (dicts) and `None`-for-absent, and never see an `ApiException` but a
`KubeError` whose message is scrubbed of Secret values.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from updatestream.core.errors import UpdateStreamError
from updatestream.spec import API_GROUP
from updatestream_operator.reconciler.models import Note, StreamRef
from updatestream_operator.scrub import SCRUBBER

log = logging.getLogger(__name__)

VERSION = "v1alpha1"
COMPONENT = "updatestream-operator"


class KubeError(UpdateStreamError):
    """A Kubernetes API call failed; the message names the call and the object."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(SCRUBBER.scrub(message))
        self.status = status


def _describe(exc: ApiException) -> str:
    reason = exc.reason or ""
    try:
        import json

        body = json.loads(exc.body or "{}")
        reason = body.get("message") or reason
    except ValueError:
        pass
    return f"HTTP {exc.status}: {reason}"


@contextmanager
def _calling(what: str) -> Iterator[None]:
    try:
        yield
    except ApiException as exc:
        raise KubeError(f"{what} failed: {_describe(exc)}", exc.status) from None


def _absent(exc: KubeError) -> bool:
    return exc.status == 404


def _read(what: str, call: Callable[[], Any]) -> Any:
    """What `call` reads; None when the object does not exist."""
    try:
        with _calling(what):
            return call()
    except KubeError as exc:
        if _absent(exc):
            return None
        raise


def _delete(what: str, call: Callable[[], Any]) -> bool:
    """Delete with `call`: True if deleted, False if it was gone already."""
    try:
        with _calling(what):
            call()
    except KubeError as exc:
        if _absent(exc):
            return False
        raise
    return True


def load_client_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """In a Pod: its ServiceAccount; elsewhere: `kubeconfig`, `$KUBECONFIG` or ~/.kube/config."""
    configuration = client.Configuration()
    loader: Any = config
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        loader.load_incluster_config(client_configuration=configuration)
    else:
        loader.load_kube_config(
            config_file=kubeconfig or os.environ.get("KUBECONFIG"),
            client_configuration=configuration,
        )
    return configuration


def owner_reference(ref: StreamRef) -> dict[str, Any]:
    """Makes an object part of the UpdateStream: deleting the stream deletes it."""
    return {
        "apiVersion": f"{API_GROUP}/{VERSION}",
        "kind": "UpdateStream",
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass
class KubeStore:
    """Typed access to the objects the operator uses, over one API client."""

    api: client.ApiClient

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> KubeStore:
        return cls(client.ApiClient(load_client_configuration(kubeconfig)))

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    # The client's generated typings are partial: calls go through `Any`.
    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> Any:
        return client.CustomObjectsApi(self.api)

    def _plain(self, obj: Any) -> dict[str, Any]:
        api: Any = self.api
        data: dict[str, Any] = api.sanitize_for_serialization(obj)
        return data

    # -- UpdateStreams and Keyspaces --------------------------------------------------------

    def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = _read(
            f"reading {plural} {namespace}/{name}",
            lambda: self.custom.get_namespaced_custom_object(
                API_GROUP, VERSION, namespace, plural, name
            ),
        )
        return found

    def get_keyspace(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get_custom("keyspaces", namespace, name)

    def get_stream(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get_custom("updatestreams", namespace, name)

    def list_streams(self, namespace: str) -> list[dict[str, Any]]:
        with _calling(f"listing UpdateStreams in {namespace}"):
            found = self.custom.list_namespaced_custom_object(
                API_GROUP, VERSION, namespace, "updatestreams"
            )
        return list(found.get("items", []))

    def wait_until_served(self, namespace: str | None, timeout: float = 120.0) -> None:
        """Return once the API server lists UpdateStreams and Keyspaces: just after their CRDs
        are installed it answers 429 ("storage is (re)initializing") for a moment, which kopf
        would log as an error at start-up."""
        deadline = time.monotonic() + timeout
        waited = False
        for plural in ("updatestreams", "keyspaces"):
            while True:
                try:
                    with _calling(f"listing {plural}"):
                        if namespace is None:
                            self.custom.list_cluster_custom_object(
                                API_GROUP, VERSION, plural, limit=1
                            )
                        else:
                            self.custom.list_namespaced_custom_object(
                                API_GROUP, VERSION, namespace, plural, limit=1
                            )
                    break
                except KubeError as exc:
                    if exc.status not in (429, 503) or time.monotonic() > deadline:
                        raise
                if not waited:
                    log.info("waiting for the API server to serve %s (it is initialising)", plural)
                    waited = True
                time.sleep(1.0)

    def patch_stream_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the operator's status fields (a merge patch of the status subresource)."""
        body = {"status": SCRUBBER.scrub_any(status)}
        with _calling(f"writing the status of UpdateStream {namespace}/{name}"):
            self.custom.patch_namespaced_custom_object_status(
                API_GROUP, VERSION, namespace, "updatestreams", name, body
            )

    def replace_keyspace_spec(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> bool:
        """Replace a Keyspace's spec if the object is still at `resource_version`; False
        when it changed since (nothing written: read it again)."""
        body = [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "replace", "path": "/spec", "value": spec},
        ]
        try:
            with _calling(f"writing the spec of Keyspace {namespace}/{name}"):
                self.custom.patch_namespaced_custom_object(
                    API_GROUP, VERSION, namespace, "keyspaces", name, body,
                    _content_type="application/json-patch+json",
                )  # fmt: skip
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    # -- Events -----------------------------------------------------------------------------

    def post_event(self, ref: StreamRef, note: Note, *, kind: str = "UpdateStream") -> None:
        """Post `note` as an Event on the object `ref` names (an UpdateStream, or a Keyspace)."""
        now = dt.datetime.now(dt.UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{ref.name}.", namespace=ref.namespace),
            involved_object=client.V1ObjectReference(
                api_version=f"{API_GROUP}/{VERSION}",
                kind=kind,
                name=ref.name,
                namespace=ref.namespace,
                uid=ref.uid,
            ),
            reason=note.reason,
            message=SCRUBBER.scrub(note.message)[:1024],
            type=note.type,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=os.environ.get("HOSTNAME", COMPONENT),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            with _calling(f"posting Event {note.reason} on {kind} {ref.name}"):
                self.core.create_namespaced_event(ref.namespace, event)
        except KubeError as exc:  # Events are best effort; the status says the same
            log.warning("%s", exc)

    # -- ConfigMaps -------------------------------------------------------------------------

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = _read(
            f"reading ConfigMap {namespace}/{name}",
            lambda: self.core.read_namespaced_config_map(name, namespace),
        )
        return None if found is None else self._plain(found)

    def put_config_map(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        *,
        labels: dict[str, str],
        annotations: dict[str, str] | None = None,
        owner: StreamRef | None = None,
    ) -> None:
        """Create the ConfigMap, or replace its data, labels and annotations."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations or {},
                "ownerReferences": [owner_reference(owner)] if owner else [],
            },
            "data": data,
        }
        try:
            with _calling(f"creating ConfigMap {namespace}/{name}"):
                self.core.create_namespaced_config_map(namespace, body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            with _calling(f"replacing ConfigMap {namespace}/{name}"):
                self.core.replace_namespaced_config_map(name, namespace, body)

    def patch_config_map_data(self, namespace: str, name: str, data: dict[str, str]) -> None:
        with _calling(f"updating ConfigMap {namespace}/{name}"):
            self.core.patch_namespaced_config_map(name, namespace, {"data": data})

    def annotate_config_map(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        with _calling(f"annotating ConfigMap {namespace}/{name}"):
            self.core.patch_namespaced_config_map(
                name, namespace, {"metadata": {"annotations": annotations}}
            )

    def list_config_maps(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        return self._list_core("ConfigMaps", "config_map", namespace, selector)

    def delete_config_map(self, namespace: str, name: str) -> None:
        _delete(
            f"deleting ConfigMap {namespace}/{name}",
            lambda: self.core.delete_namespaced_config_map(name, namespace),
        )

    # -- Pods and what Spark makes beside them -------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = _read(
            f"reading Pod {namespace}/{name}",
            lambda: self.core.read_namespaced_pod(name, namespace),
        )
        return None if found is None else self._plain(found)

    def list_pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        return self._list_core("Pods", "pod", namespace, selector)

    def _list_core(
        self, kinds: str, kind: str, namespace: str | None, selector: str
    ) -> list[dict[str, Any]]:
        """The `kinds` matching `selector`, in `namespace` or, when it is None, in every
        namespace; `kind` as the client's list calls name it (`pod`: `list_namespaced_pod`)."""
        with _calling(f"listing {kinds} ({selector})"):
            if namespace is None:
                everywhere = getattr(self.core, f"list_{kind}_for_all_namespaces")
                found = everywhere(label_selector=selector)
            else:
                in_namespace = getattr(self.core, f"list_namespaced_{kind}")
                found = in_namespace(namespace, label_selector=selector)
        return [self._plain(item) for item in found.items]

    def delete_pod(self, namespace: str, name: str, grace_seconds: int = 30) -> None:
        _delete(
            f"deleting Pod {namespace}/{name}",
            lambda: self.core.delete_namespaced_pod(
                name, namespace, grace_period_seconds=grace_seconds
            ),
        )

    def delete_owned(self, namespace: str, owner_uid: str) -> list[str]:
        """Delete the ConfigMaps, Services and NetworkPolicies owned by `owner_uid` (what
        spark-submit made for a driver). A cluster's garbage collector does the same; doing
        it here leaves nothing behind even where none runs."""
        networking: Any = client.NetworkingV1Api(self.api)
        kinds: list[tuple[str, Any, Any]] = [
            (
                "ConfigMap",
                self.core.list_namespaced_config_map,
                self.core.delete_namespaced_config_map,
            ),
            ("Service", self.core.list_namespaced_service, self.core.delete_namespaced_service),
            (
                "NetworkPolicy",
                networking.list_namespaced_network_policy,
                networking.delete_namespaced_network_policy,
            ),
        ]
        deleted = []
        for kind, list_call, delete_call in kinds:
            with _calling(f"listing {kind}s in {namespace}"):
                found = list_call(namespace).items
            for item in found:
                owners = item.metadata.owner_references or []
                if not any(o.uid == owner_uid for o in owners):
                    continue
                name = item.metadata.name
                remove = partial(delete_call, name, namespace)
                if _delete(f"deleting {kind} {namespace}/{name}", remove):
                    deleted.append(f"{kind}/{name}")
        return deleted

    # -- Secrets (the local launcher only: cluster jobs mount them) ----------------------------

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's values, decoded; every value is registered with the scrubber first."""
        with _calling(f"reading Secret {namespace}/{name}"):
            secret = self.core.read_namespaced_secret(name, namespace)
        data = {str(k): str(v) for k, v in (secret.data or {}).items()}
        SCRUBBER.register_secret_data(data, encoded=True)
        return {k: base64.b64decode(v).decode("utf-8") for k, v in data.items()}
