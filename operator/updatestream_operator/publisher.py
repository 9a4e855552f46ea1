"""The driver's progress-publisher sidecar: the job's status file into the progress ConfigMap.

The job writes its status file; this sidecar copies it, when it changed, into the
`<job>-progress` ConfigMap that the operator reads. It stops on its own once the ConfigMap
belongs to a later launch (the operator relaunched the job), so an old driver that is still
terminating never overwrites the new launch's report.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from updatestream_operator.launchers.cluster_launcher import PROGRESS_KEY
from updatestream_operator.reconciler import naming
from updatestream_operator.storage import KubeStore

log = logging.getLogger(__name__)


class Superseded(Exception):
    """The progress ConfigMap is gone or belongs to another launch."""


def publish_once(
    store: KubeStore,
    *,
    status_file: Path,
    namespace: str,
    config_map: str,
    launch_id: int,
    last: str | None = None,
) -> str | None:
    """Copy the status file if it changed since `last`; returns what is published now."""
    try:
        text = status_file.read_text()
        json.loads(text)  # never publish a half-written file
    except (OSError, ValueError):
        return last
    if text == last:
        return last
    found = store.get_config_map(namespace, config_map)
    annotations = (found or {}).get("metadata", {}).get("annotations") or {}
    if found is None or annotations.get(naming.ANNOTATION_LAUNCH_ID) != str(launch_id):
        raise Superseded(f"ConfigMap {namespace}/{config_map} is not launch {launch_id}'s")
    store.patch_config_map_data(namespace, config_map, {PROGRESS_KEY: text})
    return text


def run(
    store: KubeStore,
    *,
    status_file: Path,
    namespace: str,
    config_map: str,
    launch_id: int,
    interval: float,
    stop: threading.Event | None = None,
) -> None:
    """Publish every `interval` seconds until superseded or `stop` is set."""
    stop = stop or threading.Event()
    last: str | None = None
    while not stop.is_set():
        try:
            last = publish_once(
                store,
                status_file=status_file,
                namespace=namespace,
                config_map=config_map,
                launch_id=launch_id,
                last=last,
            )
        except Superseded as exc:
            log.info("%s; stopping", exc)
            return
        except Exception as exc:  # the API may be briefly unavailable: try again
            log.warning("publishing progress failed: %s", exc)
        stop.wait(interval)
