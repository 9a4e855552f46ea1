"""Entry point for spark-submit: `spark-submit .../updatestream_jobs/main.py --stream ...`.

Takes the same options as `updatestream run`; typed errors end the driver with a one-line
message and exit status 1.
"""

from __future__ import annotations

import sys

import click

from updatestream.core.errors import UpdateStreamError
from updatestream_jobs.cli import run


def main(argv: list[str] | None = None) -> int:
    try:
        run.main(args=argv if argv is not None else sys.argv[1:], standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except UpdateStreamError as exc:
        click.echo(f"error: {exc}", err=True)
        for note in getattr(exc, "__notes__", ()):  # e.g. where a job's full trace is
            click.echo(note, err=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
