"""The images, checked without a Docker engine: everything docker/Dockerfile copies exists and is in
the build context .dockerignore leaves; its default target (the last stage) is the lean, non-root
`herald` image with `herald` as entrypoint, its spark target adds Java, pyspark and the jobs on the
Spark entrypoint; the entrypoint and each service command it runs work in this environment; skaffold
and `make images` build both, and skaffold the one the chart runs."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from herald.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
CHART = ROOT / "charts" / "herald"
HERALD = Path(sys.executable).parent / "herald"
SPARK_JOBS_DIR = "/opt/herald/spark-jobs/jobs"
SERVICE_COMMANDS = ["standalone", "lookup", "broker", "storage", "proxy", "dlq-worker", "operator"]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    joined, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    result = []
    for line in joined:
        keyword, _, rest = line.strip().partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions (its FROM first) by stage name, in the Dockerfile's order."""
    found: dict[str, list[tuple[str, str]]] = {}
    for keyword, rest in instructions():
        if keyword == "FROM":
            words = rest.split()
            assert len(words) == 3 and words[1].upper() == "AS", f"every stage is named: FROM {rest}"
            found[words[2]] = []
        if found:
            found[list(found)[-1]].append((keyword, rest))
    return found


def stage_env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(rest))
    return env


def copy_sources() -> list[str]:
    """Sources of COPY instructions that take them from the build context (not --from=stage)."""
    sources = []
    for keyword, rest in instructions():
        if keyword not in ("COPY", "ADD"):
            continue
        words = rest.split()
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        sources += words[:-1]
    return sources


def in_build_context(path: str) -> bool:
    """Docker's .dockerignore rules: patterns in order, the last that matches the path or one of
    its parents decides; `!` re-includes."""
    included = True
    parts = Path(path.rstrip("/")).parts
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        regex = fnmatch.translate(pattern).replace(".*", "[^/]*").replace("[^/]*[^/]*", ".*")
        if pattern.startswith("**/"):
            regex = "(?:.*/)?" + fnmatch.translate(pattern[3:])
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            included = negate
    return included


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    sources = copy_sources()
    assert "pyproject.toml" in sources and "services/" in sources
    for source in sources:
        assert (ROOT / source).exists(), f"docker/Dockerfile copies {source}, which does not exist"
        assert in_build_context(source), f"docker/Dockerfile copies {source}, which .dockerignore leaves out"


def test_the_dockerignore_check_can_refuse() -> None:
    assert not in_build_context("tests/conftest.py")
    assert not in_build_context("services/herald/__pycache__")
    assert in_build_context("services/herald/cli/main.py")


def test_the_build_context_has_every_package_root_setuptools_searches() -> None:
    """pyproject.toml's packages.find roots are all copied, or `pip install .` would miss a package."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    roots = project["tool"]["setuptools"]["packages"]["find"]["where"]
    copied = [source.rstrip("/") for source in copy_sources()]
    for root in roots:
        assert any(c == root or c.startswith(root + "/") for c in copied), f"{root}/ is not copied into the image"
    assert project["project"]["readme"] in copied


def _chart_user() -> int:
    user: int = yaml.safe_load((CHART / "values.yaml").read_text())["podSecurityContext"]["runAsUser"]
    return user


def _without_build_tools(name: str, stage: list[tuple[str, str]]) -> None:
    text = " ".join(r for _, r in stage)
    for tool in ("gcc", "build-essential", "pip install", "-dev "):
        assert tool not in text, f"stage {name} installs {tool}"


def test_the_default_target_is_the_lean_herald_image() -> None:
    """`docker build` without --target builds the last stage: herald, from the builder's venv
    (Herald and the operator, no pyspark), slim, non-root, `herald` as entrypoint."""
    all_stages = stages()
    assert list(all_stages)[-1] == "herald"
    builder, final = all_stages["builder"], all_stages["herald"]
    assert any(k == "RUN" and "pip install '.[operator]'" in r for k, r in builder)
    assert not any("spark]" in r for _, r in builder)
    assert final[0][1] == "runtime AS herald"
    keywords = dict(final)
    assert keywords["ENTRYPOINT"] == '["herald"]'
    cmd = json.loads(keywords["CMD"])
    assert cmd[0] == "standalone"
    build_parser().parse_args(cmd)  # the default command is one the CLI takes
    user = keywords["USER"].split(":")[0]
    assert user not in ("0", "root") and int(user) == _chart_user()
    for name in ("runtime", "herald"):
        _without_build_tools(name, all_stages[name])
        assert not any("apt-get install" in r for _, r in all_stages[name]), f"stage {name} installs apt packages"
    assert [r for k, r in final if k == "COPY"] == ["--from=builder /opt/herald /opt/herald"]


def test_the_runtime_gives_uid_10001_a_passwd_entry() -> None:
    """Both images start from runtime, which makes the user: Spark's Hadoop login needs its name."""
    runtime = stages()["runtime"]
    useradd = next(r for k, r in runtime if k == "RUN" and "useradd" in r)
    assert f"--uid {_chart_user()}" in useradd and "groupadd" in useradd


def test_the_spark_target_has_java_pyspark_the_jobs_and_the_spark_entrypoint() -> None:
    all_stages = stages()
    spark_builder, spark = all_stages["spark-builder"], all_stages["spark"]
    assert spark_builder[0][1] == "builder AS spark-builder"
    assert any(k == "RUN" and "pip install '.[operator,spark]'" in r for k, r in spark_builder)
    assert spark[0][1] == "runtime AS spark"
    _without_build_tools("spark", spark)
    install = next(r for k, r in spark if k == "RUN" and "apt-get install" in r)
    assert "openjdk-17-jre-headless" in install and "--no-install-recommends" in install
    assert "rm -rf /var/lib/apt/lists/*" in install
    copies = [r for k, r in spark if k == "COPY"]
    assert "--from=spark-builder /opt/herald /opt/herald" in copies
    assert "spark-jobs/jobs/ " + SPARK_JOBS_DIR + "/" in copies
    entrypoint_copy = next(c for c in copies if "docker/spark-entrypoint.sh" in c)
    installed_at = entrypoint_copy.split()[-1]
    # COPY keeps the file's mode (--chmod would need BuildKit, which skaffold's builder may not use).
    assert (ROOT / "docker" / "spark-entrypoint.sh").stat().st_mode & 0o111 == 0o111
    env = stage_env(spark)
    # SPARK_HOME is the link the spark-builder makes to the venv's pyspark package.
    assert any(k == "RUN" and "ln -s" in r and "pyspark.__file__" in r and f" {env['SPARK_HOME']} " in r + " "
               for k, r in spark_builder)
    assert env["SPARK_HOME"].startswith("/opt/herald/")
    assert any(k == "RUN" and "/opt/java" in r and "ln -s" in r for k, r in spark)
    assert env["JAVA_HOME"] == "/opt/java"
    assert env["PYSPARK_PYTHON"] == "/opt/herald/bin/python"
    keywords = dict(spark)
    assert int(keywords["USER"].split(":")[0]) == _chart_user()
    entrypoint = json.loads(keywords["ENTRYPOINT"])
    assert entrypoint[-1] == installed_at and entrypoint[0] == "/usr/bin/tini" and "tini" in install
    assert "CMD" not in keywords, "Spark passes the driver's and executors' arguments as the command"


@pytest.mark.parametrize("command", [None, *SERVICE_COMMANDS])
def test_the_entrypoint_and_each_service_command_run(command: str | None) -> None:
    """What the container runs: `herald [<command>] --help` in this environment."""
    argv = [str(HERALD), "--help"] if command is None else [str(HERALD), command, "--help"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "usage: herald" in result.stdout


def _skaffold() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    return config


def skaffold_artifacts() -> dict[str, dict[str, Any]]:
    return {artifact["image"]: artifact for artifact in _skaffold()["build"]["artifacts"]}


def test_skaffold_builds_the_image_the_chart_runs() -> None:
    config = _skaffold()
    assert re.fullmatch(r"skaffold/v4beta\d+", config["apiVersion"])
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    artifact = skaffold_artifacts()[values["image"]["repository"]]
    assert (ROOT / artifact.get("context", ".") / artifact["docker"]["dockerfile"]).resolve() == DOCKERFILE
    assert "target" not in artifact["docker"], "the chart's image is the Dockerfile's default target"
    (release,) = config["deploy"]["helm"]["releases"]
    assert (ROOT / release["chartPath"]).resolve() == CHART
    image = artifact["image"].replace("-", "_").replace("/", "_").replace(".", "_")
    templates = release["setValueTemplates"]
    assert templates["image.repository"] == "{{.IMAGE_REPO_" + image + "}}"
    assert templates["image.tag"] == "{{.IMAGE_TAG_" + image + "}}@{{.IMAGE_DIGEST_" + image + "}}"


def test_skaffold_builds_the_spark_image_from_the_spark_target() -> None:
    artifacts = skaffold_artifacts()
    assert set(artifacts) == {"herald", "herald-spark"}
    spark = artifacts["herald-spark"]
    assert (ROOT / spark.get("context", ".") / spark["docker"]["dockerfile"]).resolve() == DOCKERFILE
    assert spark["docker"]["target"] == "spark" and "spark" in stages()


def test_make_images_builds_both_targets() -> None:
    dry_run = subprocess.run(["make", "-n", "images"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry_run.returncode == 0, dry_run.stderr
    builds = [shlex.split(line) for line in dry_run.stdout.splitlines() if line.startswith("docker build")]
    assert len(builds) == 2
    default, spark = builds
    assert "--target" not in default and default[default.index("-t") + 1] == "herald"
    assert spark[spark.index("--target") + 1] == "spark" and spark[spark.index("-t") + 1] == "herald-spark"
    for build in builds:
        assert build[build.index("-f") + 1] == "docker/Dockerfile" and build[-1] == "."


def test_the_chart_runs_its_image_in_every_herald_container() -> None:
    """Every template that runs herald takes the image from image.repository / image.tag (the
    metadata stores, Redis and etcd, run their own images)."""
    for template in sorted((CHART / "templates").glob("*.yaml")):
        text = template.read_text()
        if "- name: redis" in text or "- name: etcd" in text:
            continue
        for line in text.splitlines():
            if line.strip().startswith("image:"):
                assert line.strip() == 'image: {{ include "herald.image" . }}', f"{template.name}: {line.strip()}"
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert ".Values.image.repository" in helpers and ".Values.image.tag" in helpers


def test_skaffold_profiles_name_values_files_that_exist() -> None:
    for profile in _skaffold().get("profiles", []):
        for patch in profile.get("patches", []):
            if patch["path"].endswith("valuesFiles"):
                for path in patch["value"]:
                    assert (ROOT / path).is_file(), f"profile {profile['name']} names {path}"
