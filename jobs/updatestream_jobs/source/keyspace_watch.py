"""Where a running stream re-reads its Keyspace, to notice serving shard map changes.

The source asks its watch for the Keyspace before every micro-batch. A watch is named by text
(the `keyspaceWatch` option, `updatestream run --keyspace-watch`):

* a manifest file path: read again whenever the file's modification time or size changes (the
  development cluster and the operator's local launcher rewrite it atomically);
* `kubernetes:<namespace>/<name>`: the Keyspace custom resource, read through the Kubernetes API
  (in-cluster configuration in a pod, else the KUBECONFIG of the process), at most once every
  `poll_seconds`.

A read that fails (a file half-written by a tool that does not rename, an API server that does
not answer) keeps the last good Keyspace and logs a warning once per distinct message: a stream
does not stop because its Keyspace could not be re-read for a moment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from updatestream.binlog.errors import SourceOptionsError
from updatestream.spec import API_GROUP, Keyspace, SpecError, load_keyspace, parse_keyspace

log = logging.getLogger(__name__)

KUBERNETES_PREFIX = "kubernetes:"


class KeyspaceWatch(Protocol):
    def current(self) -> Keyspace:
        """The newest Keyspace that could be read."""
        ...


class FixedKeyspace:
    """A Keyspace that never changes (given inline as JSON): no hop is ever noticed."""

    def __init__(self, keyspace: Keyspace) -> None:
        self._keyspace = keyspace

    def current(self) -> Keyspace:
        return self._keyspace


class _Remembering:
    def __init__(self, keyspace: Keyspace, what: str) -> None:
        self._keyspace = keyspace
        self._what = what
        self._warned: str | None = None

    def _keep(self, problem: str) -> Keyspace:
        if problem != self._warned:
            log.warning(
                "cannot re-read the Keyspace from %s (%s); keeping the last one",
                self._what,
                problem,
            )
            self._warned = problem
        return self._keyspace

    def _accept(self, keyspace: Keyspace) -> Keyspace:
        name = self._keyspace.metadata.name
        if keyspace.metadata.name != name:
            return self._keep(f"it now holds Keyspace {keyspace.metadata.name!r}, not {name!r}")
        self._keyspace = keyspace
        self._warned = None
        return keyspace


class FileKeyspaceWatch(_Remembering):
    """A Keyspace manifest file, read again when it changes on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        try:
            initial = self._load()
        except SpecError as exc:
            raise SourceOptionsError(f"option 'keyspaceWatch': {exc}") from None
        super().__init__(initial, str(path))

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _load(self) -> Keyspace:
        stamp = self._stat()
        keyspace = load_keyspace(self.path)
        self._stamp = stamp
        return keyspace

    def current(self) -> Keyspace:
        stamp = self._stat()
        if stamp is None:
            return self._keep("the file cannot be read")
        if stamp == self._stamp:
            return self._keyspace
        try:
            keyspace = self._load()
        except SpecError as exc:
            return self._keep(str(exc))
        return self._accept(keyspace)


Getter = Callable[[str, str], dict[str, Any]]  # (namespace, name) -> the Keyspace object


def _kubernetes_getter() -> Getter:
    """In a pod: its ServiceAccount; elsewhere the process's KUBECONFIG (or ~/.kube/config)."""
    import os

    from kubernetes import client, config

    configuration = client.Configuration()
    loader: Any = config
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        loader.load_incluster_config(client_configuration=configuration)
    else:
        # KUBECONFIG read now: the library's default location is fixed when it is imported.
        loader.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    api: Any = client.CustomObjectsApi(client.ApiClient(configuration))

    def get(namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = api.get_namespaced_custom_object(
            API_GROUP, "v1alpha1", namespace, "keyspaces", name, _request_timeout=10
        )
        return obj

    return get


class KubernetesKeyspaceWatch(_Remembering):
    """The Keyspace custom resource `<namespace>/<name>`, read through the Kubernetes API."""

    def __init__(
        self,
        namespace: str,
        name: str,
        initial: Keyspace,
        *,
        getter: Getter | None = None,
        poll_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(initial, f"Keyspace {namespace}/{name} in the Kubernetes API")
        self.namespace = namespace
        self.name = name
        self._getter = getter
        self._poll = poll_seconds
        self._clock = clock
        self._last_read = float("-inf")

    def current(self) -> Keyspace:
        now = self._clock()
        if now - self._last_read < self._poll:
            return self._keyspace
        self._last_read = now
        try:
            if self._getter is None:
                self._getter = _kubernetes_getter()
            obj = self._getter(self.namespace, self.name)
            keyspace = parse_keyspace(
                {k: v for k, v in obj.items() if k in ("apiVersion", "kind", "metadata", "spec")},
                source=f"Keyspace {self.namespace}/{self.name}",
            )
        except Exception as exc:  # any API failure: keep the last Keyspace
            return self._keep(f"{type(exc).__name__}: {_short(exc)}")
        return self._accept(keyspace)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def open_watch(text: str | None, initial: Keyspace, keyspace_option: str) -> KeyspaceWatch:
    """The watch named by `text`; without one, the `keyspace` option's file if it is a path."""
    if text is None or not text.strip():
        stripped = keyspace_option.strip()
        if stripped.startswith("{"):
            return FixedKeyspace(initial)
        return FileKeyspaceWatch(Path(stripped))
    text = text.strip()
    if text.startswith(KUBERNETES_PREFIX):
        namespace, sep, name = text[len(KUBERNETES_PREFIX) :].partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise SourceOptionsError(
                f"option 'keyspaceWatch' is {text!r}; write kubernetes:<namespace>/<name> "
                "(the Keyspace custom resource) or a manifest file path"
            )
        return KubernetesKeyspaceWatch(namespace, name, initial)
    path = Path(text)
    if not path.is_file():
        raise SourceOptionsError(
            f"option 'keyspaceWatch' names {text!r}, which is not a readable file; give the "
            "Keyspace manifest file the stream should follow, or kubernetes:<namespace>/<name>"
        )
    return FileKeyspaceWatch(path)
