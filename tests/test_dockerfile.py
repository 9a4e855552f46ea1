"""The Dockerfile, .dockerignore and docker/entrypoint.sh, checked without a Docker engine.

The Dockerfile is parsed into stages and instructions and held to the image rules: multi-stage,
every base pinned to an exact version or a digest, a numeric non-root USER in the final stage,
no credentials in ARG/ENV, no build tools or HEALTHCHECK in the final stage, the wheel built
in a builder stage, vtctldclient alone taken from the Vitess build context that
scripts/build-image.sh passes. The entrypoint script is run for real with this machine's
Python, Java and the Spark bundled with pyspark.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
ENTRYPOINT = REPO_ROOT / "docker" / "entrypoint.sh"

BUILD_TOOLS = frozenset(
    {
        "gcc",
        "g++",
        "cc",
        "clang",
        "make",
        "cmake",
        "build-essential",
        "autoconf",
        "automake",
        "libtool",
        "pkg-config",
        "python3-dev",
        "libc6-dev",
        "libpython3-dev",
        "git",
        "cargo",
        "rustc",
        "maven",
        "openjdk-17-jdk",
        "openjdk-17-jdk-headless",
        "setuptools",
        "wheel",
        "build",
        "pip-tools",
    }
)
SECRET_NAMES = re.compile(
    r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY", re.IGNORECASE
)
# An exact version: at least major.minor.patch (Temurin spells the build `_6`), or a digest.
EXACT_TAG = re.compile(r"^\d+\.\d+\.\d+([._+-][0-9A-Za-z._-]+)?$")


@dataclass
class Instruction:
    keyword: str
    arguments: str
    line: int


@dataclass
class Stage:
    image: str
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their instructions; line continuations joined, comments dropped."""
    stages: list[Stage] = []
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append((start, pending + stripped))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued instruction"
    global_args: dict[str, str] = {}
    for number, line in logical:
        keyword, _, arguments = line.partition(" ")
        instruction = Instruction(keyword.upper(), arguments.strip(), number)
        if instruction.keyword == "ARG" and not stages:
            name, _, default = instruction.arguments.partition("=")
            global_args[name] = default
        elif instruction.keyword == "FROM":
            words = [w for w in instruction.arguments.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(_expand(words[0], global_args, number), name, number))
        else:
            assert stages, f"line {number}: {keyword} before the first FROM"
            stages[-1].instructions.append(instruction)
    return stages


def _expand(image: str, args: dict[str, str], line: int) -> str:
    """A FROM image with the build arguments it names replaced by their defaults."""

    def default(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert args.get(name), f"line {line}: FROM uses ${name}, which has no default ARG"
        return args[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", default, image)


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())


def packages_installed(command: str) -> set[str]:
    """Package names an `apt-get install` or `pip install` in a RUN command installs."""
    found: set[str] = set()
    for part in re.split(r"&&|;|\|\|", command):
        words = shlex.split(part)
        for i, word in enumerate(words):
            if word == "install" and i > 0 and words[i - 1] in ("apt-get", "apt", "pip", "pip3"):
                found |= {w for w in words[i + 1 :] if not w.startswith("-") and "/" not in w}
            if word == "install" and "pip" in words[:i]:
                found |= {w for w in words[i + 1 :] if not w.startswith("-") and "/" not in w}
    return {re.split(r"[=<>~\[]", name, maxsplit=1)[0] for name in found}


# -- parsing -------------------------------------------------------------------------------


def test_the_parser_reads_stages_continuations_and_comments() -> None:
    parsed = parse_dockerfile(
        "# syntax=docker/dockerfile:1\nFROM a:1.2.3 AS one\nRUN x \\\n  # note\n  && y\n"
        "FROM --platform=linux/amd64 b@sha256:00\nUSER 1:1\n"
    )
    assert [(s.image, s.name) for s in parsed] == [("a:1.2.3", "one"), ("b@sha256:00", None)]
    assert parsed[0].instructions[0].arguments == "x  && y"
    with_args = parse_dockerfile("ARG BASE=c:4.5.6\nFROM ${BASE} AS one\nFROM $BASE\n")
    assert [s.image for s in with_args] == ["c:4.5.6", "c:4.5.6"]
    assert packages_installed("apt-get update && apt-get install -y --no-install-recommends gcc")
    assert packages_installed("pip install build==1.2 && echo") == {"build"}


# -- image rules -----------------------------------------------------------------------------


def test_the_image_is_multi_stage_with_the_wheel_built_in_a_builder(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    names = {s.name for s in stages[:-1]}
    assert "builder" in names
    builder = next(s for s in stages if s.name == "builder")
    assert any("pip wheel" in r.arguments for r in builder.all("RUN"))
    final = stages[-1]
    install = [r for r in final.all("RUN") if "from=builder" in r.arguments]
    assert install, "the final stage installs the builder's wheels"
    assert "--no-index" in install[0].arguments and "requirements.lock" in install[0].arguments


def test_every_base_image_is_pinned_to_an_exact_version_or_a_digest(stages: list[Stage]) -> None:
    earlier: set[str] = set()
    for stage in stages:
        if stage.image in earlier:
            continue
        image = stage.image
        if "@sha256:" in image:
            assert re.search(r"@sha256:[0-9a-f]{64}$", image), f"line {stage.line}: {image}"
        else:
            repository, _, tag = image.rpartition(":")
            assert repository and tag, f"line {stage.line}: {image} has no tag"
            version = re.split(r"-(?=[a-z])", tag, maxsplit=1)[0]  # 3.11.13-slim-bookworm
            assert EXACT_TAG.match(version), f"line {stage.line}: {image} is not an exact version"
        if stage.name:
            earlier.add(stage.name)


def test_the_final_stage_runs_as_a_fixed_non_root_uid(stages: list[Stage]) -> None:
    final = stages[-1]
    users = final.all("USER")
    assert users, "the final stage sets no USER"
    user = users[-1].arguments
    assert re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", user), f"USER {user} is not a numeric non-root id"
    assert user.split(":")[0] == "10001"
    last_user_line = users[-1].line
    assert not [i for i in final.instructions if i.line > last_user_line and i.keyword == "RUN"], (
        "nothing runs as root after USER"
    )
    uid_created = any("--uid 10001" in r.arguments for r in final.all("RUN"))
    assert uid_created, "the user 10001 exists in the image"


def test_no_credentials_in_args_or_environment(stages: list[Stage]) -> None:
    for stage in stages:
        for instruction in stage.all("ARG") + stage.all("ENV"):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", instruction.arguments) or [
                instruction.arguments.split()[0].split("=")[0]
            ]
            secret = [n for n in names if SECRET_NAMES.search(n)]
            assert not secret, f"line {instruction.line}: {instruction.keyword} {secret}"
    text = DOCKERFILE.read_text()
    assert "--mount=type=secret" not in text or "id=" in text
    assert not re.search(r"(?i)(password|token)\s*[=:]\s*\S+", text)


def test_no_build_tools_and_no_healthcheck_in_the_final_stage(stages: list[Stage]) -> None:
    final = stages[-1]
    installed: set[str] = set()
    for run in final.all("RUN"):
        installed |= packages_installed(run.arguments)
    assert installed, "expected the final stage to install its runtime packages"
    assert not installed & BUILD_TOOLS, f"build tools in the final stage: {installed & BUILD_TOOLS}"
    assert any("uninstall --yes pip setuptools wheel" in r.arguments for r in final.all("RUN"))
    for stage in stages:
        assert not stage.all("HEALTHCHECK"), "Kubernetes probes the operator, not Docker"


def test_java_17_and_python_3_11_as_the_project_needs(stages: list[Stage]) -> None:
    final = stages[-1]
    assert final.image.startswith("python:3.11.")
    copies = [c.arguments for c in final.all("COPY") if "--from=jre" in c.arguments]
    assert copies == ["--from=jre /opt/java/openjdk /opt/java/openjdk"]
    jre = next(s for s in stages if s.name == "jre")
    assert jre.image.startswith("eclipse-temurin:17.") and "-jre" in jre.image
    requires = re.search(r'requires-python = "(.*)"', (REPO_ROOT / "pyproject.toml").read_text())
    assert requires and requires.group(1) == ">=3.11,<3.12"


def test_the_final_stage_carries_vtctldclient_from_the_vitess_context(stages: list[Stage]) -> None:
    """The operator follows a Keyspace's Vitess cluster with vtctldclient (spec.vitess): the
    image carries that one program, root's (no --chown), where its PATH finds it."""
    assert "vitess" not in {s.name for s in stages}, "`vitess` is a build context, not a stage"
    final = stages[-1]
    copies = [c.arguments for c in final.all("COPY") if "--from=vitess" in c.arguments]
    assert copies == ["--from=vitess --chmod=0755 vtctldclient /usr/local/bin/vtctldclient"]
    uses = [i for s in stages for i in s.instructions if "from=vitess" in i.arguments]
    assert len(uses) == 1, "nothing else is taken from the Vitess build context"
    assert "/usr/local/bin" in env_of(final)["PATH"].split(":")
    build = (REPO_ROOT / "scripts" / "build-image.sh").read_text()
    assert '--build-context "vitess=$VITESS_BIN_DIR"' in build


# -- entrypoints -----------------------------------------------------------------------------


def env_of(final: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in final.all("ENV"):
        for word in shlex.split(instruction.arguments):
            name, _, value = word.partition("=")
            env[name] = value
    return env


def test_the_entrypoint_script_is_copied_and_dispatches_the_images_roles(
    stages: list[Stage],
) -> None:
    final = stages[-1]
    assert final.all("ENTRYPOINT")[-1].arguments == (
        '["/usr/bin/tini", "--", "/opt/entrypoint.sh"]'
    )
    copy = [c.arguments for c in final.all("COPY") if "entrypoint.sh" in c.arguments]
    assert copy == ["--chmod=0755 docker/entrypoint.sh /opt/entrypoint.sh"]
    assert os.access(ENTRYPOINT, os.X_OK)
    assert subprocess.run(["bash", "-n", str(ENTRYPOINT)]).returncode == 0
    cases = set(re.findall(r"^  ([a-z]+)\)$", ENTRYPOINT.read_text(), re.MULTILINE))
    assert cases == {"operator", "driver", "executor", "job", "updatestream"}


def test_the_commands_the_image_runs_exist_in_the_package() -> None:
    from updatestream_cli.main import cli

    assert {"operator", "publish-progress"} <= set(cli.commands)
    scripts = re.search(r"\[project.scripts\]\s*\nupdatestream = \"(.*)\"", _pyproject())
    assert scripts and scripts.group(1) == "updatestream_cli.main:main"
    spec = importlib.util.find_spec("updatestream_jobs.main")
    assert spec is not None and spec.origin, "python -m updatestream_jobs.main (the driver)"
    assert Path(spec.origin) == REPO_ROOT / "jobs" / "updatestream_jobs" / "main.py"


def test_the_drivers_main_file_is_where_the_operator_points_spark_submit() -> None:
    from updatestream_operator.launchers.cluster_launcher import ClusterSettings

    resource = ClusterSettings().app_resource
    assert resource.startswith("local:///opt/updatestream/jobs/updatestream_jobs/")
    relative = resource.removeprefix("local:///opt/updatestream/jobs/")
    assert (REPO_ROOT / "jobs" / relative).is_file(), f"{relative} is not in jobs/"
    assert "/opt/updatestream/jobs/updatestream_jobs" in DOCKERFILE.read_text()


def test_spark_home_and_the_venv_match_where_pip_puts_pyspark(stages: list[Stage]) -> None:
    env = env_of(stages[-1])
    site = f"{env['VIRTUAL_ENV']}/lib/python3.11/site-packages"
    assert env["SPARK_HOME"] == f"{site}/pyspark"
    assert env["PATH"].split(":")[0] == f"{env['VIRTUAL_ENV']}/bin"
    import pyspark

    bundled = Path(pyspark.__file__).parent
    assert (bundled / "bin" / "spark-submit").is_file() and (bundled / "jars").is_dir()


def _pyproject() -> str:
    return (REPO_ROOT / "pyproject.toml").read_text()


# -- running the entrypoint ----------------------------------------------------------------------


def entrypoint_env(**extra: str) -> dict[str, str]:
    import pyspark

    venv_bin = str(Path(sys.executable).parent)
    java_home = os.environ.get("JAVA_HOME") or str(
        Path(subprocess.run(["readlink", "-f", "/usr/bin/java"], capture_output=True, text=True)
             .stdout.strip()).parents[1]
    )  # fmt: skip
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "JAVA_HOME": java_home,
        "PYSPARK_PYTHON": sys.executable,
        **extra,
    }


def run_entrypoint(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        capture_output=True,
        text=True,
        env=entrypoint_env(**env),
        timeout=180,
        cwd=REPO_ROOT,
    )


def test_entrypoint_runs_updatestream_the_operator_and_the_job_commands() -> None:
    from updatestream import __version__

    version = run_entrypoint("updatestream", "--version")
    assert version.returncode == 0, version.stderr
    assert __version__ in version.stdout
    operator = run_entrypoint("operator", "--help")
    assert operator.returncode == 0, operator.stderr
    assert "--namespace" in operator.stdout and "--metrics-port" in operator.stdout
    job = run_entrypoint("job", "--help")
    assert job.returncode == 0, job.stderr
    assert "--stream" in job.stdout and "--metrics-port" in job.stdout
    other = run_entrypoint("echo", "as", "given")
    assert other.stdout == "as given\n"


def test_entrypoint_driver_runs_spark_submit_in_client_mode(tmp_path: Path) -> None:
    """A real spark-submit (the JVM and Spark bundled with pyspark) running a Python main."""
    main = tmp_path / "main.py"
    main.write_text(
        "import os, sys\n"
        "print('driver-main', sys.argv[1:], os.environ.get('SPARK_SUBMIT_OPTS', ''))\n"
    )
    result = run_entrypoint(
        "driver", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
        str(main), "--stream", "s.yaml",
        SPARK_DRIVER_BIND_ADDRESS="127.0.0.1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "driver-main ['--stream', 's.yaml']" in result.stdout


def test_entrypoint_driver_needs_the_pod_address() -> None:
    result = run_entrypoint("driver", "--master", "local[1]", "x.py")
    assert result.returncode != 0
    assert "SPARK_DRIVER_BIND_ADDRESS" in result.stderr


def test_entrypoint_executor_builds_the_executor_command_line(tmp_path: Path) -> None:
    """The executor's JVM command line as Spark on Kubernetes expects it (a `java` that
    prints its arguments stands in for the JVM, which would otherwise dial the driver)."""
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    java = java_home / "bin" / "java"
    java.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    java.chmod(0o755)
    result = run_entrypoint(
        "executor",
        JAVA_HOME=str(java_home),
        SPARK_JAVA_OPT_0="-Dspark.driver.port=7078",
        SPARK_JAVA_OPT_10="-Dlast=1",
        SPARK_JAVA_OPT_2="-Dspark.app.id=two words",
        SPARK_EXECUTOR_MEMORY="2g",
        SPARK_DRIVER_URL="spark://CoarseGrainedScheduler@driver-svc:7078",
        SPARK_EXECUTOR_ID="3",
        SPARK_EXECUTOR_CORES="2",
        SPARK_APPLICATION_ID="spark-app-1",
        SPARK_EXECUTOR_POD_IP="10.0.0.7",
        SPARK_EXECUTOR_POD_NAME="us-orders-exec-3",
    )
    assert result.returncode == 0, result.stderr
    argv = result.stdout.splitlines()
    assert argv[:5] == [
        "-Dspark.driver.port=7078",
        "-Dspark.app.id=two words",
        "-Dlast=1",
        "-Xms2g",
        "-Xmx2g",
    ]
    assert argv[5] == "-cp" and argv[6].endswith("/jars/*")
    assert argv[7] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    options = dict(zip(argv[8::2], argv[9::2], strict=True))
    assert options == {
        "--driver-url": "spark://CoarseGrainedScheduler@driver-svc:7078",
        "--executor-id": "3",
        "--cores": "2",
        "--app-id": "spark-app-1",
        "--hostname": "10.0.0.7",
        "--resourceProfileId": "0",
        "--podName": "us-orders-exec-3",
    }


# -- .dockerignore ---------------------------------------------------------------------------


def _pattern(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + "$")


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = _pattern(raw.lstrip("!").strip("/"))
        if any(pattern.match(p) for p in prefixes):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_what_the_build_copies_and_nothing_else() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for needed in (
        "pyproject.toml",
        "README.md",
        "requirements.lock",
        "cli/updatestream_cli/main.py",
        "jobs/updatestream_jobs/__init__.py",
        "operator/updatestream_operator/cli.py",
        "docker/entrypoint.sh",
    ):
        assert not ignored(needed, patterns), f"{needed} is needed by the Dockerfile"
        assert (REPO_ROOT / needed).exists()
    for unwanted in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "charts/updatestream-operator/values.yaml",
        ".updatestream/state",
        "updatestream/__pycache__/cli.cpython-311.pyc",
        "updatestream.egg-info/PKG-INFO",
        "Dockerfile",
    ):
        assert ignored(unwanted, patterns), f"{unwanted} should stay out of the build context"
