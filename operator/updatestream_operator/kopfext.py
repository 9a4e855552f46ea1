"""kopf extensions: a progress storage that never writes a Secret value into an object."""

from __future__ import annotations

from typing import Any

import kopf

from updatestream_operator.scrub import SCRUBBER


class ScrubbingProgressStorage(kopf.AnnotationsProgressStorage):
    """Annotations progress storage whose records' messages (handler errors) are scrubbed."""

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        if record.get("message"):
            record = {**record, "message": SCRUBBER.scrub(str(record["message"]))}
        super().store(key=key, record=record, body=body, patch=patch)
