"""The pure parts of `spark_runner.cluster`: which masters are local, the addresses of a `spark://` URL, and the
start-up check that the master accepts a connection (against real loopback sockets)."""

from __future__ import annotations

import socket

import pytest

from spark_runner.cluster import is_local, master_addresses, master_problem


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[*]", True),
        ("local[2]", True),
        ("local[4, 2]", True),
        ("local-cluster[2,1,1024]", True),  # Spark's test cluster: executors are child JVMs on this machine
        ("spark://127.0.0.1:7077", False),
        ("k8s://https://api.example:6443", False),
        ("yarn", False),
    ],
)
def test_which_masters_are_local(master: str, local: bool) -> None:
    assert is_local(master) is local


@pytest.mark.parametrize(
    ("master", "addresses"),
    [
        ("spark://10.0.0.1:7077", [("10.0.0.1", 7077)]),
        ("spark://master", [("master", 7077)]),
        ("spark://m1:7077,m2:7078", [("m1", 7077), ("m2", 7078)]),
        ("spark://[::1]:7077", [("::1", 7077)]),
        ("k8s://https://api.example:6443", []),  # Spark resolves every other kind itself
        ("local[*]", []),
    ],
)
def test_master_addresses(master: str, addresses: list[tuple[str, int]]) -> None:
    assert master_addresses(master) == addresses


def test_master_problem_names_a_master_that_refuses_and_accepts_one_that_listens() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert master_problem(f"spark://127.0.0.1:{port}") is None
        # a standby list needs one master that answers
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            dead = closed.getsockname()[1]
        assert master_problem(f"spark://127.0.0.1:{dead},127.0.0.1:{port}") is None
    problem = master_problem(f"spark://127.0.0.1:{dead}")
    assert problem is not None and f"cannot reach the Spark master spark://127.0.0.1:{dead}" in problem
    assert "SL_SPARK_MASTER" in problem
    assert master_problem("k8s://https://api.example:6443") is None  # not checked before Spark
