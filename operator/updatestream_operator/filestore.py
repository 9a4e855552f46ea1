"""The objects the stream service works on, kept in local files instead of an API server.

`StreamService` reads UpdateStreams and Keyspaces and writes status and Events through an
`ObjectStore`; in a cluster that is `storage.KubeStore`. `FileStore` is the same contract over
a directory, for running the operator's service and launchers on one machine without
Kubernetes (the demo does):

    <root>/<namespace>/updatestreams/<name>.yaml   the UpdateStream object, status included
    <root>/<namespace>/events.jsonl                the Events posted on UpdateStreams

A Keyspace is read from a manifest file named when the store is made (for example the one a
development cluster keeps current while it reshards), else from
`<root>/<namespace>/keyspaces/<name>.yaml`. Every write replaces a whole file (a temporary file
renamed over it), so a reader never sees half an object. Status and Events go through the same
scrubber as in a cluster.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from updatestream.spec import API_VERSION
from updatestream_operator.reconciler.models import Note, StreamRef
from updatestream_operator.scrub import SCRUBBER


def merge_patch(target: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386): objects merge key by key, null removes, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class FileStore:
    """UpdateStreams, Keyspaces, status and Events as files under `root`."""

    def __init__(
        self,
        root: Path,
        keyspaces: Mapping[str, Path] | None = None,
        on_event: Callable[[StreamRef, Note], None] | None = None,
    ) -> None:
        self.root = root
        self.keyspace_files = dict(keyspaces or {})
        self.on_event = on_event
        self._lock = threading.Lock()

    # -- paths ----------------------------------------------------------------------------------

    def stream_path(self, namespace: str, name: str) -> Path:
        return self.root / namespace / "updatestreams" / f"{name}.yaml"

    def keyspace_path(self, namespace: str, name: str) -> Path:
        return self.keyspace_files.get(name) or self.root / namespace / "keyspaces" / f"{name}.yaml"

    def events_path(self, namespace: str) -> Path:
        return self.root / namespace / "events.jsonl"

    @staticmethod
    def _load(path: Path) -> dict[str, Any] | None:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return data if isinstance(data, dict) else None

    # -- what a user does: put a stream ----------------------------------------------------------

    def put_stream(self, manifest: Mapping[str, Any], namespace: str = "default") -> StreamRef:
        """Create or update an UpdateStream (`kubectl apply`): a new one gets a uid and
        generation 1; a changed spec counts the generation up; the status is kept."""
        metadata = dict(manifest.get("metadata") or {})
        name = str(metadata["name"])
        with self._lock:
            path = self.stream_path(namespace, name)
            current = self._load(path) or {}
            old_meta = current.get("metadata") or {}
            generation = int(old_meta.get("generation", 0))
            if current.get("spec") != manifest.get("spec"):
                generation += 1
            metadata |= {
                "namespace": namespace,
                "uid": old_meta.get("uid") or str(uuid.uuid4()),
                "generation": generation,
            }
            obj = {
                "apiVersion": manifest.get("apiVersion", API_VERSION),
                "kind": "UpdateStream",
                "metadata": metadata,
                "spec": manifest.get("spec"),
            }
            if current.get("status"):
                obj["status"] = current["status"]
            _replace(path, yaml.safe_dump(obj, sort_keys=False))
        return StreamRef(namespace, name, metadata["uid"], generation)

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        found = self.get_stream(namespace, name) or {}
        return dict(found.get("status") or {})

    def events(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        """The Events posted in `namespace` (on UpdateStream `name`), oldest first."""
        try:
            lines = self.events_path(namespace).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        found = [json.loads(line) for line in lines if line.strip()]
        return [e for e in found if name is None or e["involvedObject"]["name"] == name]

    # -- the ObjectStore contract of the stream service ------------------------------------------

    def get_stream(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._load(self.stream_path(namespace, name))

    def get_keyspace(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._load(self.keyspace_path(namespace, name))

    def list_streams(self, namespace: str) -> list[dict[str, Any]]:
        folder = self.root / namespace / "updatestreams"
        if not folder.is_dir():
            return []
        found = (self._load(path) for path in sorted(folder.glob("*.yaml")))
        return [obj for obj in found if obj is not None]

    def patch_stream_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        with self._lock:
            path = self.stream_path(namespace, name)
            obj = self._load(path)
            if obj is None:
                return  # deleted meanwhile, as the API server would answer 404
            patched = merge_patch(obj.get("status") or {}, SCRUBBER.scrub_any(status))
            obj["status"] = patched
            _replace(path, yaml.safe_dump(obj, sort_keys=False))

    def post_event(self, ref: StreamRef, note: Note) -> None:
        message = SCRUBBER.scrub(note.message)[:1024]
        event = {
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            "involvedObject": {"kind": "UpdateStream", "name": ref.name, "uid": ref.uid},
            "type": note.type,
            "reason": note.reason,
            "message": message,
        }
        with self._lock:
            path = self.events_path(ref.namespace)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(event) + "\n")
        if self.on_event is not None:
            self.on_event(ref, Note(note.type, note.reason, message))
