"""Resident memory and CPU time of the processes a benchmark starts, read from /proc (psutil).

- `PeakSampler` polls groups of processes in a thread and keeps, per group, the peak RSS of its
  largest process and of the group as a whole; when it stops it also reads the kernel's own
  peak (`VmHWM`) of every process still alive, so a spike between two polls is not missed.
- `spark_processes(driver)` sorts a Spark driver's process tree into the driver's Python
  process, its JVM (in local mode the executors live in it) and the Python workers.
- `cpu_seconds(processes)` adds up user and system time, including reaped children.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil
from updatestream_cli.ticker import Ticker

MB = 1024 * 1024
Groups = Callable[[], dict[str, list[psutil.Process]]]


def vm_hwm_mb(pid: int) -> float | None:
    """The process's peak resident set (`VmHWM` in /proc/<pid>/status), or None if gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def is_pyspark_worker(process: psutil.Process) -> bool:
    """A PySpark Python worker or its daemon (the JVM's class path names pyspark too)."""
    try:
        command = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return "pyspark.daemon" in command or "pyspark.worker" in command


def pyspark_workers(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The PySpark workers below `root` (default: this process; other programs' Spark
    workers on a shared machine are not ours to count)."""
    try:
        below = (root or psutil.Process()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in below if is_pyspark_worker(p)]


def pyspark_worker_peak_rss_mb(root: psutil.Process | None = None) -> float:
    """The largest peak RSS (VmHWM) among the PySpark workers below `root` (0 if none)."""
    peaks = [vm_hwm_mb(p.pid) for p in pyspark_workers(root)]
    return max((p for p in peaks if p is not None), default=0.0)


def spark_processes(driver: psutil.Process) -> dict[str, list[psutil.Process]]:
    """`driver_python`, `driver_jvm` and `python_workers` of a PySpark driver process."""
    try:
        below = driver.children(recursive=True)
    except psutil.NoSuchProcess:
        return {"driver_python": [], "driver_jvm": [], "python_workers": []}
    jvms = []
    for process in below:
        with contextlib.suppress(psutil.Error):
            if process.name() == "java":
                jvms.append(process)
    workers = [p for p in below if is_pyspark_worker(p)]
    return {"driver_python": [driver], "driver_jvm": jvms, "python_workers": workers}


def cpu_seconds(processes: Iterable[psutil.Process]) -> float:
    """User + system CPU seconds of the processes and of the children they reaped."""
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            t = process.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass
class GroupPeak:
    largest_mb: float = 0.0  # the largest single process seen
    total_mb: float = 0.0  # the largest sum over the group's processes at one poll
    processes: int = 0  # the most processes seen in the group at once


@dataclass
class PeakSampler:
    """Polls `groups()` every `interval` seconds until stopped (use as a context manager)."""

    groups: Groups
    interval: float = 0.1
    peaks: dict[str, GroupPeak] = field(default_factory=dict)
    _seen: dict[str, dict[int, psutil.Process]] = field(default_factory=dict, repr=False)
    _ticker: Ticker | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sample(self) -> dict[str, float]:
        """One poll; returns the RSS in MB of each group's largest process."""
        with self._lock:
            return self._sample()

    def _sample(self) -> dict[str, float]:
        largest: dict[str, float] = {}
        totals: dict[str, float] = {}
        for name, processes in self.groups().items():
            peak = self.peaks.setdefault(name, GroupPeak())
            seen = self._seen.setdefault(name, {})
            sizes = []
            for process in processes:
                with contextlib.suppress(psutil.Error):
                    sizes.append(process.memory_info().rss / MB)
                    seen[process.pid] = process
            totals[name] = sum(sizes)
            largest[name] = max(sizes, default=0.0)
            peak.largest_mb = max(peak.largest_mb, largest[name])
            peak.total_mb = max(peak.total_mb, totals[name])
            peak.processes = max(peak.processes, len(sizes))
        return largest

    def start(self) -> PeakSampler:
        self._ticker = Ticker(self.sample, self.interval, "rss-sampler")
        self._ticker.start()
        return self

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        self.sample()
        for name, seen in self._seen.items():  # the kernel's peaks of those still alive
            peak = self.peaks[name]
            for process in seen.values():
                hwm = vm_hwm_mb(process.pid) if process.is_running() else None
                if hwm is not None:
                    peak.largest_mb = max(peak.largest_mb, hwm)

    def __enter__(self) -> PeakSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def largest_mb(self, group: str) -> float:
        return self.peaks[group].largest_mb if group in self.peaks else 0.0
