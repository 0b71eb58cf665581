"""docker/spark-entrypoint.sh, the herald-spark image's entrypoint, run on this machine with
SPARK_HOME at the venv's pyspark and JAVA_HOME at the local Java 17 in place of the image's: a
driver pod's arguments run a job through spark-submit in client mode, an executor pod's environment
becomes the java command of Spark's KubernetesExecutorBackend, anything else is exec'd as is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "spark-entrypoint.sh"
SPARK_HOME = Path(pyspark.__file__).parent
EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
# What Spark's Kubernetes backend sets on an executor pod.
EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@herald-export-topic-driver-svc.herald.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_EXECUTOR_MEMORY": "1024m",
    "SPARK_APPLICATION_ID": "spark-0123456789abcdef",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "herald-export-topic-exec-3",
}


def java_home() -> Path:
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is missing: `make setup` installs openjdk-17-jre-headless", pytrace=False)
    return Path(java).resolve().parents[1]


def entrypoint(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
               ) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("SPARK_", "HERALD_SPARK_"))}
    environment.update(SPARK_HOME=str(SPARK_HOME), JAVA_HOME=str(java_home()), PYSPARK_PYTHON=sys.executable,
                       PYSPARK_DRIVER_PYTHON=sys.executable, **(env or {}))
    return subprocess.run([str(ENTRYPOINT), *args], capture_output=True, text=True, timeout=timeout,
                          env=environment, cwd=ROOT)


def test_the_entrypoint_is_executable_bash() -> None:
    assert os.access(ENTRYPOINT, os.X_OK)
    subprocess.run(["bash", "-n", str(ENTRYPOINT)], check=True)


@pytest.mark.parametrize("job", ["export_topic", "events_per_minute"])
def test_driver_runs_the_job_through_spark_submit_in_client_mode(job: str, tmp_path: Path) -> None:
    """The arguments a driver pod gets: its properties file, PythonRunner, the job as a local: URI."""
    properties = tmp_path / "spark.properties"
    properties.write_text("spark.master=local[1]\nspark.app.name=herald-test\n")
    result = entrypoint("driver", "--verbose", "--properties-file", str(properties),
                        "--class", "org.apache.spark.deploy.PythonRunner",
                        f"local://{ROOT}/spark-jobs/jobs/{job}.py", "--help",
                        env={"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"usage: {job}.py" in result.stdout and "--url SERVICE_URL" in result.stdout
    # spark-submit --verbose prints the settings it ran with.
    assert "(spark.submit.deployMode,client)" in result.stderr + result.stdout
    assert "(spark.driver.bindAddress,127.0.0.1)" in result.stderr + result.stdout


def test_driver_needs_the_pods_address() -> None:
    result = entrypoint("driver", "--help", env={"HERALD_SPARK_DRY_RUN": "1"})
    assert result.returncode != 0 and "SPARK_DRIVER_BIND_ADDRESS" in result.stderr


def test_executor_runs_the_kubernetes_executor_backend_with_the_pods_settings() -> None:
    env = {**EXECUTOR_ENV, "HERALD_SPARK_DRY_RUN": "1",
           "SPARK_JAVA_OPT_10": "-Dten", "SPARK_JAVA_OPT_2": "-Dtwo", "SPARK_JAVA_OPT_0": "-Dzero"}
    result = entrypoint("executor", env=env)
    assert result.returncode == 0, result.stderr
    command = result.stdout.splitlines()
    assert command[0] == f"{java_home()}/bin/java"
    # The JVM options in the order of their numbers (10 after 2), then the heap, the classpath.
    assert command[1:6] == ["-Dzero", "-Dtwo", "-Dten", "-Xms1024m", "-Xmx1024m"]
    assert command[6] == "-cp" and command[7].split(":") == [f"{SPARK_HOME}/conf", f"{SPARK_HOME}/jars/*"]
    assert command[8] == EXECUTOR_BACKEND
    arguments = dict(zip(command[9::2], command[10::2], strict=True))
    assert arguments == {
        "--driver-url": EXECUTOR_ENV["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "2",
        "--app-id": EXECUTOR_ENV["SPARK_APPLICATION_ID"],
        "--hostname": "10.1.2.3",
        "--resourceProfileId": "0",
        "--podName": "herald-export-topic-exec-3",
    }


def test_the_executor_backend_is_in_pysparks_jars() -> None:
    entry = EXECUTOR_BACKEND.replace(".", "/") + ".class"
    holders = [jar.name for jar in sorted((SPARK_HOME / "jars").glob("spark-kubernetes_*.jar"))
               if entry in zipfile.ZipFile(jar).namelist()]
    assert len(holders) == 1, holders


def test_the_executor_command_starts_the_backend() -> None:
    """Run for real: the JVM finds the class on the classpath the script builds, and the class
    parses the script's arguments (0 cores makes it print its usage and stop, before it would
    connect to the driver)."""
    result = entrypoint("executor", env={**EXECUTOR_ENV, "SPARK_EXECUTOR_CORES": "0"}, timeout=60)
    assert result.returncode == 1
    assert f"Usage: {EXECUTOR_BACKEND} [options]" in result.stderr
    assert "Unrecognized options" not in result.stderr


@pytest.mark.parametrize("missing", ["SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_MEMORY"])
def test_executor_names_a_missing_setting(missing: str) -> None:
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != missing}
    result = entrypoint("executor", env={**env, "HERALD_SPARK_DRY_RUN": "1"})
    assert result.returncode != 0 and missing in result.stderr


def test_any_other_command_is_execd_as_is() -> None:
    process = subprocess.Popen([str(ENTRYPOINT), "sh", "-c", 'echo "$$ $0 $1"; exit 7', "first arg", "second"],
                               stdout=subprocess.PIPE, text=True)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 7
    # Same process: exec'd, not run as a child.
    assert output.split(" ", 1) == [str(process.pid), "first arg second\n"]


def test_no_command_prints_the_usage() -> None:
    result = entrypoint()
    assert result.returncode == 2 and "usage: spark-entrypoint driver" in result.stderr
