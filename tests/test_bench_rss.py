"""The benchmarks' process sampling: peak RSS per group of processes, and CPU seconds."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from bench.rss import (
    PeakSampler,
    cpu_seconds,
    is_pyspark_worker,
    pyspark_worker_peak_rss_mb,
    spark_processes,
    vm_hwm_mb,
)

# Touches 80 MB, says so, then waits for its standard input to close.
HOLDER = "import sys; b = bytearray(80 << 20); print('ready', flush=True); sys.stdin.read()"


@pytest.fixture
def holder() -> Iterator[psutil.Process]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield psutil.Process(child.pid)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        assert child.stdout is not None
        child.stdout.close()


def test_the_sampler_keeps_each_groups_largest_process_and_total(
    holder: psutil.Process,
) -> None:
    me = psutil.Process()
    sampler = PeakSampler(lambda: {"holder": [holder], "both": [holder, me]}, interval=0.01)
    with sampler:
        now = sampler.sample()
    assert now["holder"] >= 80
    assert sampler.largest_mb("holder") >= 80
    assert sampler.largest_mb("nothing") == 0
    both = sampler.peaks["both"]
    assert both.processes == 2
    # the total is sampled; the largest also takes the kernel's peak of each process's whole
    # life (VmHWM), which for this test process may be far above what it holds now
    assert both.total_mb >= now["holder"] and both.largest_mb >= 80
    hwm = vm_hwm_mb(holder.pid)
    assert hwm is not None and hwm >= 80


def test_a_finished_process_has_no_peak_to_read() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    assert vm_hwm_mb(child.pid) is None


def test_a_plain_python_process_is_a_driver_without_jvm_or_workers(
    holder: psutil.Process,
) -> None:
    assert spark_processes(holder) == {
        "driver_python": [holder],
        "driver_jvm": [],
        "python_workers": [],
    }
    assert not is_pyspark_worker(holder)
    assert pyspark_worker_peak_rss_mb(holder) == 0


def test_cpu_seconds_include_children_that_have_been_reaped() -> None:
    me = psutil.Process()
    before = cpu_seconds([me])
    subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)
    assert cpu_seconds([me]) > before
