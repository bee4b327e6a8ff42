"""The README's quick start, executed: the server started with its `python -m app` line, then each command of
the block run by bash as printed (ports and data directory swapped for free ones), so the README cannot go
stale. The `mysql` line runs through the mysql client when it is installed, else through pymysql."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from tests.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def quick_start() -> tuple[str, list[str]]:
    """(the `python -m app ...` command, the commands after `make run`) of the README's "Use it" block."""
    section = README.split("## Use it", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None
    lines = block.group(1).replace("\\\n", " ").splitlines()
    first, rest = lines[0], lines[1:]
    server = re.search(r"# or: (python -m app .*)$", first)
    assert first.startswith("make run") and server is not None
    commands = [strip_comment(line) for line in rest]
    return server.group(1), [c for c in commands if c]


def strip_comment(line: str) -> str:
    """Drop a trailing `# annotation`: a `#` after a blank, outside quotes."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip()
    return line.strip()


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    command, _ = quick_start()

    def argv(port: int, mysql_port: int, data_dir: Path) -> list[str]:
        args = shlex.split(command.replace("8030", str(port)).replace("9030", str(mysql_port)))
        args[args.index("--data-dir") + 1] = str(data_dir)
        return [sys.executable if args[0] == "python" else args[0], *args[1:]]

    tmp = tmp_path_factory.mktemp("readme")
    server = ServerProcess(tmp / "data", tmp / "server.log", command=argv)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def run_mysql_line(line: str, cwd: Path) -> str:
    if shutil.which("mysql"):
        return subprocess.run(line, shell=True, cwd=cwd, capture_output=True, text=True, check=True, timeout=60).stdout
    args = shlex.split(line)
    options = dict(zip(args[1::2], args[2::2], strict=False))
    conn = pymysql.connect(host=options["-h"], port=int(options["-P"]), user=options["-u"], database=options["-D"])
    try:
        cur = conn.cursor()
        cur.execute(options["-e"])
        header = "\t".join(d[0] for d in cur.description)
        return "\n".join([header] + ["\t".join(str(v) for v in row) for row in cur.fetchall()]) + "\n"
    finally:
        conn.close()


def test_readme_quick_start_runs_as_printed(readme_server: ServerProcess, tmp_path: Path) -> None:
    _, commands = quick_start()
    outputs = []
    for command in commands:
        line = command.replace("8030", str(readme_server.port)).replace("9030", str(readme_server.mysql_port))
        if line.startswith("mysql "):
            outputs.append(run_mysql_line(line, tmp_path))
            continue
        done = subprocess.run(line, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (line, done.stderr)
        outputs.append(done.stdout)
    replies = [json.loads(out) for out, cmd in zip(outputs, commands, strict=True) if cmd.startswith("curl")]
    for reply in replies[:2]:
        assert reply["code"] == 0, reply  # CREATE DATABASE, CREATE TABLE
    load = replies[2]
    assert (load["Status"], load["Label"], load["NumberLoadedRows"]) == ("Success", "first", 2), load
    assert replies[3]["data"]["data"] == [[1, "a", 2]]  # the README's "→ 1, a, 2"
    assert outputs[-1].splitlines() == ["k\tv\tseq", "1\ta\t2"]
