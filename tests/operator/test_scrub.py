"""Secret values never leave through status, Events (kopf's progress records) or logs."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from updatestream_operator.kopfext import ScrubbingProgressStorage
from updatestream_operator.scrub import REDACTED, Scrubber, ScrubbingFilter

SECRET = "hunter2-Very-Secret"


@pytest.fixture
def scrubber() -> Scrubber:
    scrubber = Scrubber()
    scrubber.register([SECRET, "abc"])  # "abc" is too short to be redacted safely
    return scrubber


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"connect failed for {SECRET}", f"connect failed for {REDACTED}"),
        (f"data: {base64.b64encode(SECRET.encode()).decode()}", f"data: {REDACTED}"),
        ("password=topsecret host=db", f"password={REDACTED} host=db"),
        ("PASSWORD: topsecret", f"PASSWORD: {REDACTED}"),
        ('{"password": "topsecret", "user": "u"}', f'{{"password": "{REDACTED}", "user": "u"}}'),
        ("'token': 'abc.def'", f"'token': '{REDACTED}'"),
        ("--password topsecret --user u", f"--password {REDACTED} --user u"),
        ("mysql://reader:topsecret@db:3306/x", f"mysql://reader:{REDACTED}@db:3306/x"),
        ("Authorization: Bearer eyJhbGciOi.x.y", f"Authorization: Bearer {REDACTED}"),
        ("shard -80 at 0-1-42 lags 3s; abc", "shard -80 at 0-1-42 lags 3s; abc"),
    ],
    ids=[
        "value",
        "base64",
        "key=value",
        "key: value",
        "json",
        "python repr",
        "flag",
        "url",
        "bearer",
        "ordinary",
    ],
)
def test_scrub(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text) == expected


def test_secret_data_is_registered_decoded(scrubber: Scrubber) -> None:
    scrubber.register_secret_data(
        {
            "password": base64.b64encode(b"another-one").decode(),
            "username": base64.b64encode(b"reader").decode(),
        },
        encoded=True,
    )
    assert scrubber.scrub("reader: x another-one y") == f"reader: x {REDACTED} y"
    nested: Any = {"a": [f"{SECRET}!", {"b": SECRET}], "n": 3}
    assert scrubber.scrub_any(nested) == {"a": [f"{REDACTED}!", {"b": REDACTED}], "n": 3}


@pytest.fixture
def logger(scrubber: Scrubber) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ScrubbingFilter(scrubber))
    logger = logging.getLogger("updatestream-test-scrub")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_the_logging_filter_scrubs_messages_arguments_and_tracebacks(
    logger: tuple[logging.Logger, io.StringIO],
) -> None:
    log, stream = logger
    log.info("reading with %s", SECRET)
    log.warning("password=%s", "plain")
    try:
        raise RuntimeError(f"login failed: {SECRET}")
    except RuntimeError:
        log.exception("while reading")
    output = stream.getvalue()
    assert SECRET not in output and "plain" not in output
    assert output.count(REDACTED) == 3
    assert "RuntimeError: login failed" in output


def test_kopfs_progress_records_are_scrubbed_before_they_reach_the_object() -> None:
    import updatestream_operator.scrub as scrub_module

    scrub_module.SCRUBBER.register([SECRET])
    storage = ScrubbingProgressStorage(prefix="updatestream.io")
    body = kopf.Body({"metadata": {"name": "s", "annotations": {}}})
    patch = kopf.Patch()
    record: Any = {"started": "now", "message": f"spark-submit failed: {SECRET}", "retries": 1}
    storage.store(key=kopf.HandlerId("reconcile_stream"), record=record, body=body, patch=patch)
    stored = json.dumps(dict(patch))
    assert SECRET not in stored
    assert REDACTED in stored and "reconcile_stream" in stored
