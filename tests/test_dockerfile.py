"""The Dockerfile, read with dockerfile-parse and checked against the code (no Docker engine runs here): the base
image fits `requires-python`, Java is the version `app/java.py` asks for, the install is `make install` (what
`make run` runs first), the ports are the default HTTP and MySQL ports, data lives in a volume, and the
container runs `python -m app` from the install's virtualenv."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from app.java import MIN_JAVA
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text()


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(str(ROOT / "Dockerfile"))


def instructions(dockerfile: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in dockerfile.structure if i["instruction"] == name]


def test_base_image_is_a_slim_python_that_the_package_supports(dockerfile: DockerfileParser) -> None:
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim(-\w+)?", dockerfile.baseimage)
    assert match, dockerfile.baseimage
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low = re.fullmatch(r">=(\d+)\.(\d+)", required)
    assert low is not None
    assert (int(match.group(1)), int(match.group(2))) >= (int(low.group(1)), int(low.group(2)))


def test_java_is_installed_in_the_version_the_server_checks(dockerfile: DockerfileParser) -> None:
    runs = " ".join(instructions(dockerfile, "RUN"))
    assert re.search(rf"apt-get install .*\bopenjdk-{MIN_JAVA}-jre-headless\b", runs), runs
    assert re.search(r"apt-get install .*\bmake\b", runs)


def test_install_step_is_the_one_make_run_uses(dockerfile: DockerfileParser) -> None:
    assert re.search(r"^run:\s*install\b", MAKEFILE, re.MULTILINE), "make run no longer starts with make install"
    runs = instructions(dockerfile, "RUN")
    assert any(re.match(r"make install\b", run) for run in runs), runs
    copied = instructions(dockerfile, "COPY")
    assert ". ." in copied and runs.index(next(r for r in runs if r.startswith("make install"))) > 0


def test_ports_are_the_default_http_and_mysql_ports(dockerfile: DockerfileParser) -> None:
    exposed = {int(p) for value in instructions(dockerfile, "EXPOSE") for p in value.split()}
    defaults = Settings()
    assert exposed == {defaults.port, defaults.mysql_port} == {8030, 9030}
    # inside a container the server must listen beyond loopback
    assert dockerfile.envs["SL_HOST"] == "0.0.0.0"


def test_data_directory_is_a_volume(dockerfile: DockerfileParser) -> None:
    volumes = [v for value in instructions(dockerfile, "VOLUME") for v in json.loads(value)]
    assert dockerfile.envs["SL_DATA_DIR"] in volumes
    for name in dockerfile.envs:
        assert name.startswith("SL_") and name[3:].lower() in Settings.model_fields, name
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "data"} <= set(ignored)


def test_entrypoint_runs_python_m_app_from_the_install(dockerfile: DockerfileParser) -> None:
    venv = re.search(r"^VENV := (\S+)", MAKEFILE, re.MULTILINE)
    assert venv is not None
    (entrypoint,) = instructions(dockerfile, "ENTRYPOINT")
    assert json.loads(entrypoint) == [f"{venv.group(1)}/bin/python", "-m", "app"]
    assert re.search(r"^run: .*\n\t\$\(PY\) -m app$", MAKEFILE, re.MULTILINE)


def test_readme_shows_docker_build_and_run_with_both_ports() -> None:
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^docker build -t (\S+) \.$", readme, re.MULTILINE)
    run = re.search(r"^docker run .*$", readme, re.MULTILINE)
    assert run is not None
    assert "-p 8030:8030" in run.group(0) and "-p 9030:9030" in run.group(0) and ":/data" in run.group(0)


def test_container_runs_as_an_unprivileged_user_that_owns_the_data_volume(dockerfile: DockerfileParser) -> None:
    users = instructions(dockerfile, "USER")
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    user = users[-1].split(":")[0]
    runs = " ".join(instructions(dockerfile, "RUN"))
    assert re.search(rf"useradd .*\b{user}\b", runs), runs
    assert re.search(rf"chown {user}(:{user})? {dockerfile.envs['SL_DATA_DIR']}\b", runs), runs
    # the user is switched after the install, so the code and its virtualenv stay root-owned (read-only to it)
    order = [i["instruction"] for i in dockerfile.structure]
    assert order.index("USER") > max(i for i, name in enumerate(order) if name == "RUN")


@pytest.mark.parametrize(
    "where", [pytest.param("README.md", id="the README's docker run"), pytest.param("Dockerfile", id="the Dockerfile's")]
)
def test_documented_docker_run_sets_a_root_password_the_container_needs(
    dockerfile: DockerfileParser, where: str
) -> None:
    text = (ROOT / where).read_text()
    run = re.search(r"docker run .*$", text, re.MULTILINE)
    assert run is not None
    password = re.search(r"-e SL_ROOT_PASSWORD=(\S+)", run.group(0))
    assert password, run.group(0)
    host = dockerfile.envs["SL_HOST"]
    assert Settings(host=host).exposure_problem() is not None, "without a password the container must not start"
    assert Settings(host=host, root_password=password.group(1)).exposure_problem() is None
