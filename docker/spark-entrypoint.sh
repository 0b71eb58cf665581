#!/usr/bin/env bash
# The herald-spark image's entrypoint (docker/Dockerfile, target spark). Spark's Kubernetes backend
# starts a driver pod with `driver <spark-submit arguments>` and an executor pod with `executor`,
# passing the executor's settings as SPARK_* environment variables; any other command runs as is.
# SPARK_HOME and JAVA_HOME default to the image's; HERALD_SPARK_DRY_RUN=1 prints the command, one
# argument a line, instead of running it.
set -euo pipefail

SPARK_HOME=${SPARK_HOME:-/opt/herald/spark}
JAVA_HOME=${JAVA_HOME:-/opt/java}
export SPARK_HOME JAVA_HOME

run() {
  if [ "${HERALD_SPARK_DRY_RUN:-}" = 1 ]; then
    printf '%s\n' "$@"
    exit 0
  fi
  exec "$@"
}

if [ "${1:-}" = driver ] || [ "${1:-}" = executor ]; then
  # Hadoop's login, which Spark runs, needs a user name for the uid; the image has one for 10001.
  if ! getent passwd "$(id -u)" >/dev/null; then
    echo "spark-entrypoint: uid $(id -u) has no passwd entry: run the image as user 10001" >&2
  fi
fi

case "${1:-}" in
  driver)
    shift
    # The driver pod is the driver: spark-submit in client mode, listening on the pod's address.
    run "$SPARK_HOME/bin/spark-submit" \
      --deploy-mode client \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?is not set: it is the driver pod IP}" \
      "$@"
    ;;
  executor)
    shift
    # The driver hands the executor's JVM options over as SPARK_JAVA_OPT_<n>, in the order of n.
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4 -n || true)
    classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
    if [ -n "${HADOOP_CONF_DIR:-}" ]; then classpath="$HADOOP_CONF_DIR:$classpath"; fi
    if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then classpath="$classpath:$SPARK_EXTRA_CLASSPATH"; fi
    if [ -n "${SPARK_DIST_CLASSPATH:-}" ]; then classpath="$classpath:$SPARK_DIST_CLASSPATH"; fi
    memory=${SPARK_EXECUTOR_MEMORY:?is not set}
    run "$JAVA_HOME/bin/java" "${java_opts[@]}" "-Xms$memory" "-Xmx$memory" -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL:?is not set}" \
      --executor-id "${SPARK_EXECUTOR_ID:?is not set}" \
      --cores "${SPARK_EXECUTOR_CORES:?is not set}" \
      --app-id "${SPARK_APPLICATION_ID:?is not set}" \
      --hostname "${SPARK_EXECUTOR_POD_IP:?is not set}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-$HOSTNAME}"
    ;;
  "")
    echo "usage: spark-entrypoint driver <spark-submit arguments> | executor | <command> [arguments]" >&2
    exit 2
    ;;
  *)
    run "$@"
    ;;
esac
