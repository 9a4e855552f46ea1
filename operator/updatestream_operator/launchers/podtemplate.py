"""The driver Pod template spark-submit gets: the operator's, built on the deployment's own.

The Helm chart renders a driver Pod template (scheduling, pull secrets, annotations, scratch
volumes) into the Spark configuration. spark-submit takes one template only, and the launcher
must pass its own (labels, owner reference, the job's volumes, the progress sidecar), so it
merges the two: everything of the base is kept unless the operator sets the same thing, in
which case the operator's wins.

- metadata labels and annotations: the union, the operator's on a clash;
- the driver container: the base's, with the operator's security context; its volume mounts
  are the operator's plus the base's at other paths;
- other containers: the base's (by name, the operator's on a clash), then the operator's;
- volumes: the operator's plus the base's of other names;
- every other spec field (nodeSelector, tolerations, affinity, imagePullSecrets,
  priorityClassName, ...): the base's, unless the operator sets it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from updatestream_operator.launchers.launcher import LaunchError


def load_base_template(path: Path) -> dict[str, Any]:
    """Read and check a Pod template file; LaunchError says what is wrong with it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise LaunchError(
            f"driver Pod template {path}: cannot read it ({exc.strerror}); mount the Spark "
            "configuration there or leave --driver-pod-template unset"
        ) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LaunchError(f"driver Pod template {path}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or document.get("kind", "Pod") != "Pod":
        found = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise LaunchError(
            f"driver Pod template {path}: expected a Pod manifest (kind: Pod), found {found!r}"
        )
    for field, kind in (("metadata", dict), ("spec", dict)):
        if not isinstance(document.get(field) or {}, kind):
            raise LaunchError(f"driver Pod template {path}: {field} must be a mapping")
    for field in ("containers", "volumes"):
        value = (document.get("spec") or {}).get(field) or []
        if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
            raise LaunchError(
                f"driver Pod template {path}: spec.{field} must be a list of mappings"
            )
    return document


def merge_driver_template(
    base: dict[str, Any] | None, ours: dict[str, Any], driver: str
) -> dict[str, Any]:
    """`ours` built on `base` (see the module's rules); `driver` names the driver container."""
    if not base:
        return ours
    merged = copy.deepcopy(base)
    merged["apiVersion"], merged["kind"] = ours.get("apiVersion", "v1"), "Pod"
    metadata = merged["metadata"] = merged.get("metadata") or {}
    for key, value in ours.get("metadata", {}).items():
        if key in ("labels", "annotations"):
            metadata[key] = {**(metadata.get(key) or {}), **value}
        else:
            metadata[key] = value

    spec = merged["spec"] = merged.get("spec") or {}
    our_spec = ours.get("spec", {})
    for key, value in our_spec.items():
        if key not in ("containers", "volumes"):
            spec[key] = value
    spec["containers"] = _containers(spec.get("containers") or [], our_spec["containers"], driver)
    spec["volumes"] = _by_name(spec.get("volumes") or [], our_spec.get("volumes") or [])
    return merged


def _containers(
    base: list[dict[str, Any]], ours: list[dict[str, Any]], driver: str
) -> list[dict[str, Any]]:
    base_driver = next((c for c in base if c.get("name") == driver), {})
    result = []
    for container in ours:
        if container.get("name") == driver:
            merged = {**base_driver, **container}
            own_paths = {m["mountPath"] for m in container.get("volumeMounts", [])}
            own_names = {m["name"] for m in container.get("volumeMounts", [])}
            merged["volumeMounts"] = list(container.get("volumeMounts", [])) + [
                m
                for m in base_driver.get("volumeMounts", [])
                if m.get("mountPath") not in own_paths and m.get("name") not in own_names
            ]
            result.append(merged)
        else:
            result.append(container)
    names = {c.get("name") for c in result}
    return [c for c in base if c.get("name") not in names] + result


def _by_name(base: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {v.get("name") for v in ours}
    return list(ours) + [v for v in base if v.get("name") not in names]
