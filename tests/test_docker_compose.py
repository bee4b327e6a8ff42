"""docker-compose.yml, read with PyYAML and checked against the settings and the Dockerfile (no Docker engine
runs here): one image built from the Dockerfile runs the master, the workers (the pyspark package's
spark-class) and two servers; SL_SPARK_MASTER names the master's service and port; one shared volume is mounted
at SL_SHARED_DIR in each server and every worker, a data volume in each server alone; both servers keep their
catalog and store in the PostgreSQL service; the published ports are the default HTTP and MySQL ports (the
second server's on other host ports); the executors can reach each server and all fit the workers."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from dockerfile_parse import DockerfileParser
from sqlalchemy.engine import make_url

from app.settings import Settings
from spark_runner.cluster import is_local, master_addresses

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]


def workers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if "deploy.worker.Worker" in " ".join(s.get("entrypoint", []))}


def servers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services running `python -m app` (the image's entrypoint)."""
    return {name: s for name, s in services.items() if "SL_SPARK_MASTER" in s.get("environment", {})}


def server_settings(services: dict[str, dict[str, Any]], name: str = "server") -> Settings:
    env = services[name]["environment"]
    assert all(name.startswith("SL_") and name[3:].lower() in Settings.model_fields for name in env), env
    with mock.patch.dict(os.environ, env):  # read as the server reads its environment (SL_SPARK_CONF is JSON)
        return Settings()


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """target path → volume name"""
    return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}


def spark_args(service: dict[str, Any]) -> dict[str, str]:
    args = service.get("command", [])
    return {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}


def test_one_image_from_the_dockerfile_runs_master_workers_and_servers(services: dict[str, dict[str, Any]]) -> None:
    tag = re.search(r"^docker build -t (\S+) \.$", README, re.MULTILINE)
    assert tag is not None
    assert {s["image"] for name, s in services.items() if name != "postgres"} == {tag.group(1)}
    assert services["postgres"]["image"].startswith("postgres:")
    assert set(servers(services)) == {"server", "server-2"}
    for server in servers(services).values():
        assert server["build"] == "." and "entrypoint" not in server  # the Dockerfile's
    master = services["spark-master"]["entrypoint"]
    assert master == [".venv/bin/spark-class", "org.apache.spark.deploy.master.Master"]
    assert len(workers(services)) == 2
    for worker in workers(services).values():
        assert worker["entrypoint"] == [".venv/bin/spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert spark_args(worker)["--cores"] == "1"


def test_the_servers_name_the_masters_service_and_port(services: dict[str, dict[str, Any]]) -> None:
    for name in servers(services):
        settings = server_settings(services, name)
        assert not is_local(settings.spark_master)
        ((host, port),) = master_addresses(settings.spark_master)
        assert host in services and spark_args(services[host])["--port"] == str(port)
        for worker in workers(services).values():
            assert worker["command"][-1] == settings.spark_master and host in worker["depends_on"]
        assert set(workers(services)) <= set(services[name]["depends_on"])


def test_both_servers_keep_their_catalog_and_store_in_the_postgres_service(services: dict[str, dict[str, Any]]) -> None:
    uris = {server_settings(services, name).resolved_catalog_uri for name in servers(services)}
    assert len(uris) == 1
    url = make_url(uris.pop())
    assert url.drivername == "postgresql+psycopg" and url.host == "postgres" and url.port == 5432
    env = services["postgres"]["environment"]
    assert (url.username, url.password, url.database) == (
        env["POSTGRES_USER"],
        env["POSTGRES_PASSWORD"],
        env["POSTGRES_DB"],
    )
    for name, server in servers(services).items():
        assert "postgres" in server["depends_on"]
        assert server_settings(services, name).resolved_store_uri == str(url.render_as_string(hide_password=False))
        assert server["hostname"] == name  # stable across re-creation: the server's name among several


def test_one_shared_volume_at_the_shared_dir_everywhere_and_a_data_volume_in_each_server_alone(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    settings = server_settings(services)
    shared = str(settings.shared_dir)
    data_dir = DockerfileParser(str(ROOT / "Dockerfile")).envs["SL_DATA_DIR"]
    data_volumes = set()
    for name in servers(services):
        server = mounts(services[name])
        assert str(server_settings(services, name).shared_dir) == shared
        assert set(server) == {shared, data_dir} and server[shared] != server[data_dir]
        data_volumes.add(server[data_dir])
    assert len(data_volumes) == 2  # each server's own
    server = mounts(services["server"])
    for worker in workers(services).values():
        assert mounts(worker) == {shared: server[shared]}  # the same volume at the same path; not the data
    catalog = mounts(services["postgres"])
    assert set(compose["volumes"]) == data_volumes | {server[shared]} | set(catalog.values())
    # the image's user owns the shared dir, so a fresh volume there is writable (Docker copies the ownership)
    structure = DockerfileParser(str(ROOT / "Dockerfile")).structure
    runs = " ".join(i["value"] for i in structure if i["instruction"] == "RUN")
    assert re.search(rf"chown \S+ [^&]*{re.escape(shared)}\b", runs), runs
    assert settings.resolved_warehouse.is_relative_to(Path(shared).resolve())


def test_the_servers_publish_the_default_ports_and_have_a_password(services: dict[str, dict[str, Any]]) -> None:
    defaults = Settings()
    host = DockerfileParser(str(ROOT / "Dockerfile")).envs["SL_HOST"]
    assert set(services["server"]["ports"]) == {f"{p}:{p}" for p in (defaults.port, defaults.mysql_port)}
    published: list[str] = []
    for name, server in servers(services).items():
        settings = server_settings(services, name)
        assert {p.split(":")[1] for p in server["ports"]} == {str(defaults.port), str(defaults.mysql_port)}
        published += [p.split(":")[0] for p in server["ports"]]
        assert settings.model_copy(update={"host": host}).exposure_problem() is None
        assert server["restart"] == "on-failure"  # a failed start-up cluster check is tried again
    assert len(set(published)) == len(published)


def test_executors_reach_each_server_and_all_fit_the_workers(services: dict[str, dict[str, Any]]) -> None:
    def mib(size: str) -> int:
        match = re.fullmatch(r"(\d+)([mg])", size)
        assert match, size
        return int(match[1]) * (1024 if match[2] == "g" else 1)

    cores = 0
    for name in servers(services):
        conf = server_settings(services, name).spark_conf
        assert conf["spark.driver.host"] == name
        for worker in workers(services).values():
            assert mib(conf["spark.executor.memory"]) <= mib(spark_args(worker)["--memory"])
        cores += int(conf["spark.cores.max"])
    assert cores <= sum(int(spark_args(w)["--cores"]) for w in workers(services).values())


def test_readme_documents_the_compose_file() -> None:
    section = README.split("## Run on a Spark cluster", 1)[1].split("\n## ", 1)[0]
    assert "docker compose up" in section and "docker-compose.yml" in section
    assert json.dumps("SL_SHARED_DIR")[1:-1] in section and "SL_SPARK_MASTER" in section
