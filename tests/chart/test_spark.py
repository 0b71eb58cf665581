"""What the chart makes for Spark jobs (spark-jobs/k8s): the drivers' ServiceAccount, named
<fullname>-spark, and the jobs' PersistentVolumeClaim, <fullname>-spark-data, each only when asked;
for a release named "herald" the names spark-jobs/k8s uses."""

from __future__ import annotations

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.chart.render import (
    KUBERNETES_VERSION,
    NAMESPACE,
    RELEASE,
    Manifest,
    named,
    of_kind,
    render,
    render_failure,
)

BOTH = ("spark.rbac.create=true", "spark.dataVolume.create=true")


@pytest.fixture(scope="module")
def spark_manifests() -> list[Manifest]:
    return render(sets=BOTH)


def claims(manifests: list[Manifest]) -> list[Manifest]:
    return of_kind(manifests, "PersistentVolumeClaim")


def test_the_spark_objects_are_off_by_default(default_manifests: list[Manifest]) -> None:
    assert not claims(default_manifests)
    assert not [m for m in of_kind(default_manifests, "ServiceAccount") if m["metadata"]["name"].endswith("-spark")]


def test_production_values_add_the_service_account_but_no_volume(production_manifests: list[Manifest]) -> None:
    """The volume needs a ReadWriteMany StorageClass, which only the cluster's owner can name."""
    named(production_manifests, "ServiceAccount", "herald-spark")
    assert not claims(production_manifests)


def test_the_spark_objects_are_named_for_the_release(spark_manifests: list[Manifest]) -> None:
    assert RELEASE == "herald"
    account = named(spark_manifests, "ServiceAccount", "herald-spark")
    binding = named(spark_manifests, "RoleBinding", "herald-spark")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    (claim,) = claims(spark_manifests)
    assert claim["metadata"]["name"] == "herald-spark-data"


def test_the_volume_is_valid_shared_and_kept_on_uninstall(spark_manifests: list[Manifest]) -> None:
    (claim,) = claims(spark_manifests)
    kubernetes_validate.validate(claim, KUBERNETES_VERSION, strict=True)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert "storageClassName" not in claim["spec"], "empty: the cluster's default StorageClass"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["metadata"].get("namespace", NAMESPACE) == NAMESPACE


def test_the_volume_takes_its_name_class_size_and_access_modes_from_values() -> None:
    manifests = render(sets=(*BOTH, "spark.dataVolume.name=jobs", "spark.dataVolume.storageClassName=nfs",
                             "spark.dataVolume.size=1Ti", "spark.dataVolume.accessModes={ReadWriteOnce}",
                             "spark.rbac.serviceAccountName=drivers"))
    (claim,) = claims(manifests)
    kubernetes_validate.validate(claim, KUBERNETES_VERSION, strict=True)
    assert claim["metadata"]["name"] == "jobs"
    assert claim["spec"]["storageClassName"] == "nfs"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Ti"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    named(manifests, "ServiceAccount", "drivers")
    assert named(manifests, "RoleBinding", "herald-spark")["subjects"][0]["name"] == "drivers"


@pytest.mark.parametrize(("assignment", "path", "reason"), [
    ("spark.dataVolume.accessModes={ReadWriteSometimes}", "/spark/dataVolume/accessModes/0", "must be one of"),
    ("spark.dataVolume.size=lots", "/spark/dataVolume/size", "does not match pattern"),
    ("spark.dataVolume.sise=1Gi", "/spark/dataVolume", "'sise' not allowed"),
])
def test_the_schema_refuses_a_malformed_volume(assignment: str, path: str, reason: str) -> None:
    error = render_failure(sets=("spark.dataVolume.create=true", assignment))
    assert f"'{path}'" in error and reason in error
