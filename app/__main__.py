"""`python -m app [--host H] [--port P] [--data-dir D]`: check Java, then serve on uvicorn."""

from __future__ import annotations

import argparse
import logging
import socket
import sys

from app.java import JavaMissing, check_java


def listen(host: str, port: int) -> socket.socket:
    # protocol TCP named: asyncio sets TCP_NODELAY only on such sockets (`app.connections.no_delay` does anyway)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description="Doris-compatible stream load on Spark")
    parser.add_argument("--host", help="listen address (SL_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (SL_PORT, default 8030)")
    parser.add_argument("--mysql-port", type=int, help="MySQL-protocol port (SL_MYSQL_PORT, default 9030)")
    parser.add_argument("--data-dir", help="data directory (SL_DATA_DIR, default ./data)")
    args = parser.parse_args(argv)
    from app.memory import limit_arenas

    limit_arenas()  # before any thread: see app/memory.py
    try:
        check_java()
    except JavaMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from pydantic import ValidationError

    from app.connections import server_config
    from app.lifecycle import DrainingServer
    from app.main import create_app
    from app.settings import Settings

    overrides = {
        k: v
        for k, v in {
            "host": args.host,
            "port": args.port,
            "mysql_port": args.mysql_port,
            "data_dir": args.data_dir,
        }.items()
        if v is not None
    }
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:  # a setting no server can run with (SL_SHARED_DIR's scheme, say): one line each
        for error in exc.errors():
            print(f"error: {error['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    if (problem := settings.exposure_problem()) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if settings.warehouse_uri is not None:  # a remote warehouse pyarrow cannot reach (no libhdfs, say): one line
        from tables.storage import StorageError

        try:
            settings.warehouse_storage()
        except StorageError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
    # one line per record on stderr, next to uvicorn's: the structured `app.load` lines go here
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    config = server_config(app, settings)
    server = DrainingServer(config, app.state.gate, settings.shutdown_timeout_seconds)
    if settings.fe_redirect:
        # one server, one lifespan and one drain for the FE port and the BE port
        server.run(sockets=[listen(settings.host, settings.port), listen(settings.host, settings.be_port)])
    else:
        server.run()
    # a lifespan that failed (a Spark cluster check, say) has logged why; supervisors see a failed start
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main())
