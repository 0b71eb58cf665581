#!/usr/bin/env bash
# Submit a Herald Spark job straight to Kubernetes with spark-submit (no Spark operator):
#   spark-jobs/k8s/spark-submit.sh events_per_minute --topic events --output /data/epm --checkpoint /data/ckpt/epm
#   spark-jobs/k8s/spark-submit.sh export_topic --topic orders --output /data/exports/orders
# The driver runs in the cluster on the herald-spark image (docker build --target spark), as the
# chart's Spark ServiceAccount (spark.rbac.create=true), mounts the chart's Spark PVC
# (spark.dataVolume.create=true) at /data and reads Herald through the proxy Service. The defaults
# are the names the chart gives a release called "herald". Settings from the environment:
#   K8S_API          the API server (default: the current kubectl context's)
#   NAMESPACE        where the driver and executors run (default herald)
#   SPARK_IMAGE      the herald-spark image, with your registry (default herald-spark:latest)
#   SERVICE_URL      Herald from inside the cluster (default herald://herald-proxy:6660)
#   SERVICE_ACCOUNT  the driver's ServiceAccount (default herald-spark)
#   EXECUTORS        executor count (default 2)
#   DATA_CLAIM       a PVC mounted at /data on driver and executors (default herald-spark-data; empty: none)
#   DRY_RUN=1        print the spark-submit command, one argument a line, instead of running it
set -euo pipefail

job=${1:?usage: $0 events_per_minute|export_topic [job arguments...]}
shift
case "$job" in
  events_per_minute|export_topic) ;;
  *) echo "unknown job '$job': use events_per_minute or export_topic" >&2; exit 2 ;;
esac

K8S_API=${K8S_API:-$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')}
NAMESPACE=${NAMESPACE:-herald}
SPARK_IMAGE=${SPARK_IMAGE:-herald-spark:latest}
SERVICE_URL=${SERVICE_URL:-herald://herald-proxy:6660}
SERVICE_ACCOUNT=${SERVICE_ACCOUNT:-herald-spark}
EXECUTORS=${EXECUTORS:-2}
DATA_CLAIM=${DATA_CLAIM-herald-spark-data}

volume=()
if [ -n "$DATA_CLAIM" ]; then
  for role in driver executor; do
    prefix="spark.kubernetes.$role.volumes.persistentVolumeClaim.data"
    volume+=(--conf "$prefix.options.claimName=$DATA_CLAIM" --conf "$prefix.mount.path=/data")
  done
fi

command=(
  spark-submit
  --master "k8s://$K8S_API"
  --deploy-mode cluster
  --name "herald-${job//_/-}"
  --conf spark.kubernetes.namespace="$NAMESPACE"
  --conf spark.kubernetes.container.image="$SPARK_IMAGE"
  --conf spark.kubernetes.authenticate.driver.serviceAccountName="$SERVICE_ACCOUNT"
  --conf spark.executor.instances="$EXECUTORS"
  --conf spark.sql.session.timeZone=UTC
  "${volume[@]}"
  "local:///opt/herald/spark-jobs/jobs/$job.py"
  --url "$SERVICE_URL" "$@"
)
if [ "${DRY_RUN:-}" = 1 ]; then
  printf '%s\n' "${command[@]}"
  exit 0
fi
exec "${command[@]}"
