"""The Kubernetes manifests of the Spark jobs (SparkApplications of the operator's v1beta2 CRD) and
spark-submit.sh agree with what they run against: the image skaffold builds from the Dockerfile's
spark target, with the jobs where the Dockerfile puts them, and the proxy Service, ServiceAccount and
PVC the chart makes for a release named "herald" with spark.rbac.create and spark.dataVolume.create."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.chart.render import RELEASE, Manifest, of_kind, render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "spark-jobs" / "k8s"
JOBS = ROOT / "spark-jobs" / "jobs"
SCRIPT = K8S / "spark-submit.sh"


@pytest.fixture(scope="module")
def chart() -> list[Manifest]:
    assert RELEASE == "herald", "the manifests assume the release is named herald"
    return render(sets=("spark.rbac.create=true", "spark.dataVolume.create=true"))


def manifests() -> dict[str, dict[str, Any]]:
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(K8S.glob("*.yaml"))}


def spark_image() -> str:
    """The image skaffold builds from the Dockerfile's spark target."""
    config = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    (image,) = [a["image"] for a in config["build"]["artifacts"] if a["docker"].get("target") == "spark"]
    assert isinstance(image, str)
    return image


def jobs_dir_in_image() -> str:
    """Where docker/Dockerfile copies spark-jobs/jobs."""
    found = re.findall(r"^COPY\s+spark-jobs/jobs/\s+(\S+?)/?$", (ROOT / "docker" / "Dockerfile").read_text(), re.M)
    assert len(found) == 1, found
    return str(found[0])


def proxy_address(chart: list[Manifest]) -> tuple[str, int]:
    (service,) = [s for s in of_kind(chart, "Service")
                  if s["metadata"]["labels"].get("app.kubernetes.io/component") == "proxy"]
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"]
    return service["metadata"]["name"], port


def only_name(chart: list[Manifest], kind: str, name_part: str) -> str:
    (name,) = [m["metadata"]["name"] for m in of_kind(chart, kind) if name_part in m["metadata"]["name"]]
    assert isinstance(name, str)
    return name


def service_url(arguments: list[str]) -> tuple[str, int]:
    values = [a.split("=", 1)[1] for a in arguments if a.startswith("--url=")]
    if not values:
        values = [arguments[i + 1] for i, a in enumerate(arguments) if a == "--url"]
    (url,) = values
    parts = urlsplit(url)
    assert parts.scheme == "herald" and parts.hostname and parts.port, url
    return parts.hostname, parts.port


def test_each_job_has_a_spark_application_running_it() -> None:
    apps = manifests()
    assert set(apps) == {"events-per-minute", "export-topic"}
    for name, app in apps.items():
        assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
        spec = app["spec"]
        assert spec["type"] == "Python" and spec["mode"] == "cluster"
        job = f"{name.replace('-', '_')}.py"
        assert (JOBS / job).exists()
        assert spec["mainApplicationFile"] == f"local://{jobs_dir_in_image()}/{job}"


def test_the_applications_run_the_spark_image_skaffold_builds() -> None:
    for app in manifests().values():
        repository, _, tag = app["spec"]["image"].rpartition(":")
        assert repository == spark_image() and tag == "latest"


def test_the_applications_use_the_charts_proxy_service_account_and_volume(chart: list[Manifest]) -> None:
    account = only_name(chart, "ServiceAccount", "spark")
    claim = only_name(chart, "PersistentVolumeClaim", "spark")
    assert (account, claim) == ("herald-spark", "herald-spark-data")
    for app in manifests().values():
        spec = app["spec"]
        assert service_url(spec["arguments"]) == proxy_address(chart)
        assert spec["driver"]["serviceAccount"] == account
        (volume,) = spec["volumes"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim
        for role in ("driver", "executor"):
            (mount,) = spec[role]["volumeMounts"]
            assert mount["name"] == volume["name"]
        mount_path = spec["driver"]["volumeMounts"][0]["mountPath"]
        outputs = [a.split("=", 1)[1] for a in spec["arguments"] if a.startswith(("--output=", "--checkpoint="))]
        assert outputs and all(o.startswith(mount_path + "/") for o in outputs)


def test_the_proxy_check_can_fail(chart: list[Manifest]) -> None:
    """The standalone's proxy port, which the manifests once named, is not the chart's."""
    assert service_url(["--url=herald://herald-proxy:6662"]) != proxy_address(chart)


def submit(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "DRY_RUN": "1", "K8S_API": "https://kubernetes.example:6443", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                          env=environment)


def confs(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1].split("=", 1) for i, a in enumerate(command) if a == "--conf"]
    return {key: value for key, value in pairs}


def test_the_submit_script_defaults_agree_with_the_chart_and_the_image(chart: list[Manifest]) -> None:
    result = submit("export_topic", "--topic", "orders", "--output", "/data/exports/orders")
    assert result.returncode == 0, result.stderr
    command = result.stdout.splitlines()
    assert command[0] == "spark-submit"
    assert command[command.index("--master") + 1] == "k8s://https://kubernetes.example:6443"
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    conf = confs(command)
    assert conf["spark.kubernetes.container.image"] == f"{spark_image()}:latest"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == only_name(
        chart, "ServiceAccount", "spark")
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.data"
        assert conf[f"{prefix}.options.claimName"] == only_name(chart, "PersistentVolumeClaim", "spark")
        assert conf[f"{prefix}.mount.path"] == "/data"
    application = next(a for a in command if a.startswith("local://"))
    assert application == f"local://{jobs_dir_in_image()}/export_topic.py"
    job_arguments = command[command.index(application) + 1:]
    assert service_url(job_arguments) == proxy_address(chart)
    assert job_arguments[-4:] == ["--topic", "orders", "--output", "/data/exports/orders"]


def test_the_submit_script_takes_its_settings_from_the_environment() -> None:
    result = submit("events_per_minute", SPARK_IMAGE="registry.example.com/herald-spark:abc",
                    SERVICE_ACCOUNT="other-spark", DATA_CLAIM="")
    assert result.returncode == 0, result.stderr
    conf = confs(result.stdout.splitlines())
    assert conf["spark.kubernetes.container.image"] == "registry.example.com/herald-spark:abc"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "other-spark"
    assert not [key for key in conf if "persistentVolumeClaim" in key]


def test_the_submit_script_is_valid_bash_and_refuses_an_unknown_job() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    refused = submit("no_such_job")
    assert refused.returncode == 2 and "unknown job" in refused.stderr
