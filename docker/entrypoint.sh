#!/usr/bin/env bash
# Entry point of the UpdateStream image (one image for the operator, the Spark driver and the
# Spark executors). It dispatches on its first argument:
#
#   operator [options]     the operator: `updatestream operator [options]` (the default)
#   driver [args]          a Spark driver Pod, as spark-submit creates it on Kubernetes: runs
#                          spark-submit in client mode inside the Pod with Spark's arguments
#   executor               a Spark executor Pod, as the driver creates it (settings in env)
#   job [args]             the streaming job without spark-submit: python -m updatestream_jobs.main
#   updatestream [args]    any `updatestream` command (publish-progress, run, ...)
#   anything else          run as given
set -euo pipefail

: "${SPARK_HOME:?SPARK_HOME must point at the Spark bundled with pyspark}"
: "${JAVA_HOME:?JAVA_HOME must point at a Java 17 runtime}"

# Spark's jars, after what Spark or the user put first.
spark_classpath() {
  local classpath="${SPARK_HOME}/jars/*"
  if [ -n "${SPARK_CLASSPATH:-}" ]; then classpath="${SPARK_CLASSPATH}:${classpath}"; fi
  if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"; fi
  printf '%s' "${classpath}"
}

# The executor's JVM options: Spark passes them as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
executor_java_options() {
  local name
  for name in $(compgen -e | grep '^SPARK_JAVA_OPT_[0-9]*$' | sort -t_ -k4 -n); do
    printf '%s\0' "${!name}"
  done
}

command=${1:-operator}
if [ $# -gt 0 ]; then shift; fi

case "${command}" in
  operator)
    exec updatestream operator "$@"
    ;;
  driver)
    : "${SPARK_DRIVER_BIND_ADDRESS:?Spark on Kubernetes sets SPARK_DRIVER_BIND_ADDRESS to the Pod IP}"
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    java_options=()
    while IFS= read -r -d '' option; do java_options+=("${option}"); done \
      < <(executor_java_options)
    exec "${JAVA_HOME}/bin/java" \
      "${java_options[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY:?}" \
      "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "$(spark_classpath)" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL:?}" \
      --executor-id "${SPARK_EXECUTOR_ID:?}" \
      --cores "${SPARK_EXECUTOR_CORES:?}" \
      --app-id "${SPARK_APPLICATION_ID:?}" \
      --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:?}" \
      "$@"
    ;;
  job)
    exec python -m updatestream_jobs.main "$@"
    ;;
  updatestream)
    exec updatestream "$@"
    ;;
  *)
    exec "${command}" "$@"
    ;;
esac
