"""An INSERT whose JVM dies after its commit answers its commit (found by `tools/torture.py --fault jvm`: the
statement's cleanup, a Spark call on the dead JVM, turned the committed INSERT into `No backend available`, so
a client retried a load that was there)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.server_process import ServerProcess


def test_an_insert_committed_as_its_jvm_dies_answers_success(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", tmp_path / "server.log")
    proc.start(SL_PAUSE_AT="after_commit:ins:3")  # the first load into `ins` waits 3 s once committed
    try:
        proc.sql("d", "CREATE DATABASE d")
        proc.sql("d", "CREATE TABLE ins (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
        replies: list[Any] = []

        def insert() -> None:
            resp = httpx.post(
                f"{proc.base_url}/api/query/default_cluster/d",
                json={"stmt": "INSERT INTO ins VALUES (1, 'a')"},
                auth=("root", ""),
                timeout=120,
            )
            replies.append(resp.json())

        client = threading.Thread(target=insert)
        client.start()
        proc.wait_for_log(["paused at after_commit (table ins)"], timeout=120)
        jvms = [pid for pid in proc.children() if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert jvms
        for pid in jvms:
            os.kill(pid, 9)
        client.join(120)
        assert replies and replies[0]["code"] == 0, replies  # not `No backend available as scan node`
        label = replies[0]["data"]["status"]["label"]
        proc.wait_for_log(["new Spark session ready"], timeout=240)
        assert proc.label_state("d", label) == "VISIBLE"
        assert proc.sql("d", "SELECT k, v FROM ins")["data"] == [[1, "a"]]
    finally:
        proc.kill()
