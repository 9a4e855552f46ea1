"""The ways to run a streaming job, behind one `Launcher` protocol."""

from updatestream_operator.launchers.launcher import Launcher, LaunchError

__all__ = ["LaunchError", "Launcher"]
