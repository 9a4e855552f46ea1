"""How a reshard workflow reports its progress: phases, copied rows, replication lag, replay.

The command line shows them as live rows (`cli._RichReporter`), the demo turns phases into its
own steps, tests record them; `QuietReporter` shows nothing and is the base of those that show
only some.
"""

from __future__ import annotations

from typing import Any, Protocol

from updatestream_cli.devcluster.replay import ReplayWindow


class Reporter(Protocol):
    def phase(self, name: str, detail: str = "") -> None: ...
    def copied(self, source: str, target: str, rows: int) -> None: ...
    def lag(self, report: list[dict[str, Any]]) -> None: ...
    def replay(self, window: ReplayWindow) -> None: ...


class QuietReporter:
    """A Reporter that shows nothing; subclass it to show only some steps."""

    def phase(self, name: str, detail: str = "") -> None:
        pass

    def copied(self, source: str, target: str, rows: int) -> None:
        pass

    def lag(self, report: list[dict[str, Any]]) -> None:
        pass

    def replay(self, window: ReplayWindow) -> None:
        pass
