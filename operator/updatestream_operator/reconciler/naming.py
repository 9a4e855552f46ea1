"""Names, labels and annotations of what the operator creates for a job.

A job's name is deterministic for one UpdateStream (by uid) and one key range: a second launch
of the same job collides with the first in the API server instead of running beside it. Labels
carry the stream uid and the key range so that a launcher finds a stream's jobs before starting
any (`updatestream.io/stream-uid=<uid>`).
"""

from __future__ import annotations

import hashlib
import re

from updatestream.core.keyrange import KeyRange
from updatestream.spec import API_GROUP
from updatestream_operator.reconciler.models import JobSpec, StreamRef

MANAGED_BY = "updatestream-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_STREAM = f"{API_GROUP}/stream"
LABEL_STREAM_UID = f"{API_GROUP}/stream-uid"
LABEL_KEY_RANGE = f"{API_GROUP}/key-range"
LABEL_ROLE = f"{API_GROUP}/role"

ANNOTATION_KEY_RANGE = f"{API_GROUP}/key-range"
ANNOTATION_SHARD_MAP = f"{API_GROUP}/shard-map"
ANNOTATION_SPEC_HASH = f"{API_GROUP}/spec-hash"
ANNOTATION_LAUNCH_ID = f"{API_GROUP}/launch-id"
# "true" on a job launched watching its Keyspace, able to hop inside its running query
ANNOTATION_IN_JOB_HOPS = f"{API_GROUP}/in-job-hops"

# Where the driver finds its configuration and Secrets (the spark-submit launcher).
CONFIG_MOUNT = "/etc/updatestream/job"
SECRETS_MOUNT = "/etc/updatestream/secrets"
STATUS_MOUNT = "/var/run/updatestream"
STATUS_FILE = f"{STATUS_MOUNT}/status.json"

_MAX_BASE = 40
_INVALID = re.compile(r"[^a-z0-9-]+")


def key_range_slug(key_range: KeyRange) -> str:
    """A label-safe spelling of a key range: `-` -> `all`, `-80` -> `min-80`, `80-` -> `80-max`."""
    if key_range.is_complete:
        return "all"
    start = key_range.start.hex() or "min"
    end = key_range.end.hex() or "max"
    return f"{start}-{end}"


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:6]


def job_name(stream: StreamRef, key_range: KeyRange) -> str:
    """`us-<stream>-<key range>-<hash>`, a DNS-1123 label of at most 50 characters."""
    base = _INVALID.sub("-", f"{stream.name}-{key_range_slug(key_range)}".lower()).strip("-")
    base = base[:_MAX_BASE].rstrip("-")
    return f"us-{base}-{_short_hash(stream.uid, key_range.name)}"


def config_map_name(job_id: str) -> str:
    """The ConfigMap holding a job's configuration (stream, keyspace, start positions)."""
    return f"{job_id}-config"


def progress_map_name(job_id: str) -> str:
    """The ConfigMap a driver's progress publisher writes; it outlives the job's Pod."""
    return f"{job_id}-progress"


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return value.strip("-_.") or "x"


def stream_selector(stream_uid: str) -> str:
    return f"{LABEL_STREAM_UID}={stream_uid}"


def job_labels(stream: StreamRef, key_range: KeyRange, role: str = "job") -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_PART_OF: "updatestream",
        LABEL_STREAM: _label_value(stream.name),
        LABEL_STREAM_UID: stream.uid,
        LABEL_KEY_RANGE: key_range_slug(key_range),
        LABEL_ROLE: role,
    }


def job_annotations(job: JobSpec) -> dict[str, str]:
    annotations = {
        ANNOTATION_KEY_RANGE: job.key_range.name,
        ANNOTATION_SHARD_MAP: str(job.shard_map),
        ANNOTATION_SPEC_HASH: job.spec_hash,
        ANNOTATION_LAUNCH_ID: str(job.launch_id),
    }
    if job.in_job_hops:
        annotations[ANNOTATION_IN_JOB_HOPS] = "true"
    return annotations
