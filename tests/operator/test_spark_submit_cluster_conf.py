"""What the spark-submit launcher tells Spark so it runs on a real cluster: the API server's
address for the driver, executors dialling the driver Pod's IP, CPU requests, and the
checkpoints on a claim that outlives the driver Pod. Built without calling the API."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kubernetes import client
from updatestream_operator.config import ClusterSettings
from updatestream_operator.launchers.cluster_launcher import STATE_VOLUME
from updatestream_operator.launchers.spark_submit import SparkSubmitLauncher
from updatestream_operator.storage import KubeStore

from tests.operator.test_local_launcher import job_spec

TEMPLATE = Path("/tmp/driver-pod-template.yaml")


def launcher(**settings: Any) -> SparkSubmitLauncher:
    store = KubeStore(client.ApiClient())  # building the command never calls the API
    return SparkSubmitLauncher(store, ClusterSettings(**settings), master="k8s://https://api")


def test_the_cluster_settings_reach_spark() -> None:
    ours = launcher(
        driver_master="https://10.77.0.1:6443",
        core_request="500m",
        checkpoint_claim="checkpoints",
    )
    conf = ours.spark_conf(job_spec(), TEMPLATE)
    assert conf["spark.kubernetes.driver.master"] == "https://10.77.0.1:6443"
    assert conf["spark.kubernetes.executor.useDriverPodIP"] == "true"
    assert conf["spark.kubernetes.driver.request.cores"] == "500m"
    assert conf["spark.kubernetes.executor.request.cores"] == "500m"
    volumes = {v["name"]: v for v in ours.pod_template(job_spec())["spec"]["volumes"]}
    assert volumes[STATE_VOLUME]["persistentVolumeClaim"] == {"claimName": "checkpoints"}
    assert "emptyDir" not in volumes[STATE_VOLUME]


def test_without_settings_spark_keeps_its_defaults_and_checkpoints_are_scratch() -> None:
    ours = launcher()
    conf = ours.spark_conf(job_spec(), TEMPLATE)
    assert "spark.kubernetes.driver.master" not in conf
    assert not any(key.endswith("request.cores") for key in conf)
    volumes = {v["name"]: v for v in ours.pod_template(job_spec())["spec"]["volumes"]}
    assert volumes[STATE_VOLUME] == {"name": STATE_VOLUME, "emptyDir": {}}


def test_a_streams_own_core_request_and_conf_win_over_the_operators() -> None:
    job = job_spec()
    spark = job.spec.spark.model_copy(
        update={
            "driver": {"coreRequest": "250m"},
            "conf": {"spark.kubernetes.executor.useDriverPodIP": "false"},
        }
    )
    job = dataclasses.replace(job, spec=job.spec.model_copy(update={"spark": spark}))
    conf = launcher(core_request="500m").spark_conf(job, TEMPLATE)
    assert conf["spark.kubernetes.driver.request.cores"] == "250m"
    assert conf["spark.kubernetes.executor.request.cores"] == "500m"
    assert conf["spark.kubernetes.executor.useDriverPodIP"] == "false"


def test_the_spark_main_file_gets_the_run_commands_options_it_parses() -> None:
    """spark-submit passes the driver's arguments to main.py, which is `updatestream run`."""
    from updatestream_jobs.cli import run

    command = launcher().command(job_spec(), TEMPLATE)
    main_file = next(i for i, arg in enumerate(command) if arg.endswith("/main.py"))
    options = command[main_file + 1 :]
    assert options == ["--config", "/etc/updatestream/job/job.yaml"]
    known = {name for param in run.params for name in param.opts}
    assert {o for o in options if o.startswith("--")} <= known


def test_a_job_that_hops_in_place_keeps_one_checkpoint_across_launches() -> None:
    ours = launcher(checkpoint_claim="checkpoints")
    hopping = dataclasses.replace(job_spec(launch_id=1), in_job_hops=True)
    again = dataclasses.replace(hopping, launch_id=2)
    assert ours.driver_config(hopping).checkpoint == ours.driver_config(again).checkpoint
    planned = job_spec(launch_id=1)  # relaunched after a hop from planned positions
    assert (
        ours.driver_config(planned).checkpoint
        != ours.driver_config(dataclasses.replace(planned, launch_id=2)).checkpoint
    )
