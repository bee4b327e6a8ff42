"""`python -m app [--host H] [--port P] [--data-dir D]`: check Java, then serve on uvicorn."""

from __future__ import annotations

import argparse
import sys

from app.java import JavaMissing, check_java


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description="Doris-compatible stream load on Spark")
    parser.add_argument("--host", help="listen address (SL_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (SL_PORT, default 8030)")
    parser.add_argument("--data-dir", help="data directory (SL_DATA_DIR, default ./data)")
    args = parser.parse_args(argv)
    try:
        check_java()
    except JavaMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    from app.lifecycle import DrainingServer
    from app.main import create_app
    from app.settings import Settings

    overrides = {k: v for k, v in {"host": args.host, "port": args.port, "data_dir": args.data_dir}.items() if v}
    settings = Settings(**overrides)
    app = create_app(settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level)
    DrainingServer(config, app.state.gate, settings.shutdown_timeout_seconds).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
