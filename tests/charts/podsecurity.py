"""The Pod Security Standard `restricted`, plus this project's own rules, as a Python check.

`restricted` (Kubernetes' Pod Security Standards): no host namespaces, ports or paths, only
the volume types it lists, not privileged, no privilege escalation, every capability dropped
(only NET_BIND_SERVICE may be added back), runAsNonRoot, a non-zero runAsUser if one is set,
and a RuntimeDefault or Localhost seccomp profile. The project adds: a fixed non-zero UID, a
read-only root filesystem, and an emptyDir on /tmp for scratch space.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

ALLOWED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})


def restricted_violations(spec: Mapping[str, Any]) -> list[str]:
    """What in a Pod spec breaks the rules above (empty when nothing)."""
    problems: list[str] = []
    pod = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"{flag} is true")
    if pod.get("runAsUser") == 0:
        problems.append("the Pod runs as UID 0")
    volumes = {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        volumes[volume["name"]] = kinds
        if not kinds <= ALLOWED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} is of a forbidden type {sorted(kinds)}")
    containers = [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]
    if not containers:
        problems.append("the Pod has no containers")
    for container in containers:
        name = container.get("name", "?")
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"container {name} is privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"container {name} does not set allowPrivilegeEscalation: false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"container {name} does not drop ALL capabilities")
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            problems.append(f"container {name} adds capabilities {sorted(added)}")
        if context.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            problems.append(f"container {name} does not set runAsNonRoot: true")
        uid = context.get("runAsUser", pod.get("runAsUser"))
        if not isinstance(uid, int) or uid == 0:
            problems.append(f"container {name} has no fixed non-zero runAsUser ({uid!r})")
        seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"container {name} has seccomp profile {seccomp!r}")
        if context.get("readOnlyRootFilesystem") is not True:
            problems.append(f"container {name} does not have a read-only root filesystem")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"container {name} uses hostPort {port['hostPort']}")
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
        scratch = mounts.get("/tmp")
        if scratch is None or volumes.get(scratch) != {"emptyDir"}:
            problems.append(f"container {name} has no emptyDir mounted on /tmp")
    return problems


def pod_specs(manifests: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of every Pod the manifests define: workloads, and pod templates
    shipped in ConfigMaps (for Spark)."""
    for doc in manifests:
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        if kind in WORKLOAD_KINDS:
            yield f"{kind}/{name}", doc["spec"]["template"]["spec"]
        elif kind == "CronJob":
            yield f"{kind}/{name}", doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif kind == "Pod":
            yield f"{kind}/{name}", doc["spec"]
        elif kind == "ConfigMap":
            for key, text in (doc.get("data") or {}).items():
                if not key.endswith((".yaml", ".yml")):
                    continue
                embedded = yaml.safe_load(text)
                if isinstance(embedded, dict) and embedded.get("kind") == "Pod":
                    yield f"{kind}/{name}[{key}]", embedded["spec"]
