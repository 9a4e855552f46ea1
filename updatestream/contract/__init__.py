"""The typed seams between the operator and the streaming job.

- `job.JobConfig`: what one job streams and where it keeps its state. The operator writes it as
  one file (`job.yaml`, in the job's ConfigMap or local state directory); `updatestream run
  --config` reads it; `updatestream run` with flags builds the same object.
- `progress.ProgressReport`: what a running job reports after every micro-batch (its status
  file). The job writes it; the operator, the demo, the harnesses and the benchmarks read it.

Both belong to neither side, so they live below both.
"""
