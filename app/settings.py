"""Server settings: one pydantic-settings class, built once and passed in (env prefix `SL_`)."""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import socket
from pathlib import Path, PurePath
from typing import Annotated

from pydantic import BeforeValidator, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tables.load_spec import InputLimits
from tables.storage import StorageError, local_root, parse_root
from tables.warehouse import WarehouseStorage


def _storage_root(setting: str, *, remote: bool = False) -> BeforeValidator:
    """A shared dir or warehouse: a plain path as given, a `file:` URI as its folder; with `remote`, an `hdfs:`,
    `s3a:` or `s3:` URI as written (a `str`); other URIs are refused with the reason (`tables/storage.py`)."""

    def parse(value: object) -> object:
        if value is None or not isinstance(value, str | PurePath):
            return value
        if isinstance(value, PurePath) or (":/" not in value and value[:5].lower() != "file:"):
            return Path(value)
        try:
            if remote and (root := parse_root(value, setting=setting)).local is None:
                return root.text
            return local_root(value, setting=setting)
        except StorageError as exc:
            raise ValueError(exc.message) from None

    return BeforeValidator(parse)


class Settings(BaseSettings):
    """Every setting has an `SL_` environment variable (e.g. `SL_PORT`); defaults give the embedded local setup."""

    model_config = SettingsConfigDict(env_prefix="SL_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address the HTTP server listens on.")
    port: int = Field(8030, description="HTTP port (Doris FE's http_port).")
    data_dir: Path = Field(
        Path("./data"),
        description="Holds the catalog, transactions, labels and error logs (read by the server alone); also the "
        "shared dir's files unless `shared_dir` is set.",
    )
    shared_dir: Annotated[Path | None, _storage_root("SL_SHARED_DIR")] = Field(
        None,
        description="Folder every Spark node mounts at the same path (NFS, EFS, a cluster filesystem), as a path "
        "or a `file:` URI (`file:///mnt/shared`): staged bodies, the files a load splits, group-commit payloads "
        "and, by default, the warehouse: every file an executor reads or writes. Default: data_dir (enough for a "
        "local master). `hdfs:`, `s3a:` and `s3:` URIs are refused at start (the group-commit write-ahead log "
        "appends, syncs and hard-links files).",
    )
    spark_master: str = Field(
        "local[*]",
        description="Spark master URL, passed to Spark as given: `local[*]` by default, `spark://host:7077` for a "
        "standalone cluster (checked at start: see `spark_cluster_check_timeout_seconds`), `k8s://...`, `yarn`.",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark settings, as a JSON object: e.g. `spark.executor.memory`, `spark.cores.max`, "
        "`spark.dynamicAllocation.enabled` for a shared cluster.",
    )
    spark_wedged_after_seconds: float = Field(
        60.0,
        ge=0,
        description="How long a Spark call whose jobs were cancelled (a load past its `timeout`, a statement past "
        "`query_timeout`) may go on before the JVM counts as wedged and is replaced, as a JVM that stopped is: a task "
        "that ignores its cancel (a backtracking regex) would otherwise hold its core for good. 0: never.",
    )
    spark_scratch_max_bytes: int = Field(
        20 * 1024**3,
        ge=0,
        description="Bytes Spark's scratch folder (`<data dir>/spark-local`: shuffles and spills) may hold while SQL "
        "statements run: past it they are cancelled (loads go on). 0: no bound.",
    )
    spark_cluster_check_timeout_seconds: float = Field(
        120.0,
        gt=0,
        description="With a master other than `local`: at start, how long an executor may take to register and run "
        "a job that reads a file the server wrote under the shared dir and writes one back; the server exits "
        "naming the problem otherwise. While serving, how long the session may be left without executors (its "
        "master restarted) before a new session is built.",
    )
    catalog_uri: str | None = Field(None, description="SQL catalog URI; default: SQLite file under data_dir.")
    warehouse: Annotated[Path | str | None, _storage_root("SL_WAREHOUSE", remote=True)] = Field(
        None,
        description="Warehouse folder, a path or a `file:` URI (as `shared_dir`), or an `s3a://`, `s3://` or "
        "`hdfs://` URI that Spark and pyarrow reach (passed through, untested here); default: shared_dir/warehouse.",
    )
    warehouse_via_arrow_fs: bool = Field(
        False,
        description="For tests: reach the (local) warehouse through pyarrow.fs with `file:` URIs given to Spark and "
        "recorded in Iceberg, the code path a URI warehouse takes (`tables/warehouse.py`).",
    )
    root_password: SecretStr = Field(
        SecretStr(""),
        description="Password of root and admin, set when the data dir is first used (SET PASSWORD changes it).",
    )
    max_body_bytes: int = Field(10240 * 1024 * 1024, description="Largest stream-load body (streaming_load_max_mb).")
    max_json_body_bytes: int = Field(
        100 * 1024 * 1024,
        description="Largest JSON body read as one document (strip_outer_array or read_json_by_line false); "
        "Doris's streaming_load_json_max_mb.",
    )
    label_keep_seconds: float = Field(43200.0, description="How long finished labels are kept (12 h, as Doris).")
    sql_row_limit: int = Field(1000, description="Default row limit of the HTTP SQL endpoint.")
    log_level: str = Field("info", description="Server log level.")
    maintenance_interval_seconds: float = Field(
        300.0, description="How often labels are forgotten, snapshots expired and orphan files removed."
    )
    orphan_grace_seconds: float = Field(3600.0, description="Unreferenced files younger than this are kept.")
    lease_seconds: float = Field(
        30.0,
        gt=1.0,
        description="Several servers on one store: a background duty (maintenance, compaction, dynamic partitions, "
        "precommit timeouts) whose server died is taken over within this many seconds; a dead server's place in a "
        "table's version order is freed after it.",
    )
    dynamic_partition_check_interval_seconds: float = Field(
        600.0,
        description="How often tables with dynamic partitions get their partitions ahead created and those past "
        "`dynamic_partition.start` dropped (Doris FE config of the same name); 0 turns it off.",
    )
    snapshot_keep_seconds: float = Field(3600.0, description="Iceberg snapshots older than this are expired.")
    snapshot_keep_count: int = Field(
        20,
        ge=1,
        description="At most this many Iceberg snapshots per table are kept (commit time grows with them: every "
        "commit writes them all into the new metadata file); a table past twice as many is trimmed in its next "
        "commit.",
    )
    shutdown_timeout_seconds: float = Field(
        60.0, description="On SIGTERM, how long loads already receiving data may take to finish."
    )
    fe_redirect: bool = Field(
        False,
        description="Front-end mode: stream loads on `port` answer Doris's 307 redirect to the BE listener on "
        "`be_port` (without reading the body), as a Doris FE does; both ports serve every other route.",
    )
    mysql_port: int = Field(
        9030, description="MySQL-protocol port (Doris FE's query_port); 0 picks a free port, logged at start."
    )
    be_port: int = Field(8040, description="BE listener port in front-end mode (Doris's webserver_port).")
    max_running_txn_num_per_db: int = Field(
        1000,
        ge=1,
        description="A two-phase stream load is refused while its database has this many unfinished (PREPARE, "
        "PRECOMMITTED, COMMITTED) transactions (Doris's max_running_txn_num_per_db): precommitted loads hold their "
        "files until committed, aborted or timed out.",
    )
    precommit_timeout_seconds: float = Field(
        3600.0, description="A two-phase load left PRECOMMITTED this long is aborted (Doris's precommit timeout)."
    )
    warm_up_seconds: float = Field(
        20.0,
        ge=0,
        description="At start, warm the JVM with private loads in a scratch catalog of its own (one bulk load, then "
        "for this many seconds one-row loads and sync group commits), so that the first user loads run as fast as a "
        "warm server's; it stops at the first user load. 0: no warm-up.",
    )
    group_commit_interval_ms: float = Field(
        100.0,
        description="Group commit: how long a group collects loads after its first one arrives at an idle table "
        "worker; loads that queued while the worker's previous group ran go at once, as does a full group.",
    )
    group_commit_max_loads: int = Field(
        1024,
        ge=1,
        description="Group commit: most loads in one group (one job, one commit); small CSV bodies of up to 4 MB "
        "together are one inline source whatever their number.",
    )
    group_commit_max_wal_num_per_table: int = Field(
        2048,
        ge=1,
        description="Group commit: most acknowledged async loads of one table waiting in the WAL to become visible "
        "(two full groups); past it an async load is answered once visible, as a sync_mode one (Doris's BE setting "
        "of the same name refuses it instead).",
    )
    group_commit_wal_max_disk_limit: str = Field(
        "10%",
        pattern=r"^\s*[0-9]+(\.[0-9]+)?%?\s*$",
        description="Group commit: most bytes of acknowledged async loads waiting in the WAL to become visible, in "
        "bytes or as a percentage of the data dir's free disk space at start (Doris: 10%); past it an async load "
        "is answered once visible, as a sync_mode one (Doris switches it to sync_mode).",
    )
    routine_load_min_batch_rows: int = Field(
        200000, description="Smallest `max_batch_rows` a routine load may ask for (Doris: 200000)."
    )
    compaction_interval_seconds: float = Field(
        10.0, description="How often background compaction looks at every table; 0 turns it off."
    )
    compaction_defer_seconds: float = Field(
        60.0,
        description="How long background compaction may wait for bulk loads (bodies past 32 MiB, whose job takes "
        "every core) to end before it runs beside them.",
    )
    compaction_min_rowsets: int = Field(
        5, description="Cumulative compaction once this many small rowsets follow the cumulative point."
    )
    compaction_promotion_bytes: int = Field(
        64 * 1024 * 1024,
        description="Rowsets this big are base level; small rowsets holding this much together are compacted too.",
    )
    compaction_base_min_rowsets: int = Field(5, description="Base compaction once this many base-level rowsets exist.")
    http_max_connections: int = Field(
        1000,
        ge=1,
        description="Most HTTP connections and requests served at once; past it a request is answered 503.",
    )
    http_header_timeout_seconds: float = Field(
        30.0, gt=0, description="A connection whose request head is not complete this long after it opened is closed."
    )
    forwarded_allow_ips: str = Field(
        "",
        description="Proxies (comma-separated addresses or CIDRs, `*` for any) whose `X-Forwarded-For` and "
        "`X-Forwarded-Proto` name the client; empty: none, the client is the connection's peer.",
    )
    pause_at: str | None = Field(
        None,
        description="Test only: `point[:table][:once|:<seconds>],...` (staging, job, before_commit, after_commit) "
        "blocks there (for ever, or the first load for that many seconds).",
    )
    max_line_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1,
        description="Longest CSV / JSON line of a stream-load body, after decompression (a body with no newline is "
        "one line); a longer line fails the load.",
    )
    max_string_bytes: int = Field(
        1048576,
        ge=1,
        description="Longest STRING value a load stores; longer values are filtered rows (Doris's "
        "string_type_length_soft_limit_bytes).",
    )
    max_expression_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1,
        description="Largest value a `columns` / `where` / `delete` expression may build (repeat, lpad, replace, "
        "concat of those), counting each column as a whole line; larger ones are refused before the load.",
    )
    max_decompressed_bytes: int = Field(
        10240 * 1024 * 1024, ge=1, description="Largest stream-load body after decompression."
    )
    max_decompression_ratio: float = Field(
        100.0,
        gt=0,
        description="A compressed body may expand to at most this many times its size (bodies under 16 MiB "
        "decompressed are always allowed).",
    )
    body_idle_timeout_seconds: float = Field(
        300.0, gt=0, description="A stream-load body that sends no bytes for this long fails the load."
    )
    body_total_timeout_seconds: float = Field(
        3600.0,
        gt=0,
        description="A stream-load body still arriving after this long (or after the load's `timeout`, if sooner) "
        "fails the load.",
    )
    error_log_line_bytes: int = Field(
        64 * 1024,
        ge=64,
        description="Longest error-log line; the rest is cut and marked `error log is too long` "
        "(Doris's load_error_log_limit_bytes).",
    )
    broker_allowed_roots: list[str] = Field(
        default_factory=list,
        description="Folders (or URI prefixes such as `s3a://bucket/in/`) broker load may read, as a JSON list; "
        "empty: every path is refused (Doris's user_files_secure_path). /proc, /sys, /dev and the server's own "
        "folders are refused even under a root.",
    )
    broker_max_waiting_jobs: int = Field(
        100, ge=1, description="Unfinished broker loads past which LOAD is refused (Doris's desired_max_waiting_jobs)."
    )
    broker_load_concurrency: int = Field(2, ge=1, description="Broker loads that run at once; the rest wait in order.")
    kafka_cert_dir: Path | None = Field(
        None,
        description="Folder of the certificate and keytab files routine load's `property.ssl.*.location` and "
        "`property.sasl.kerberos.keytab` may name (`FILE:name` or a path inside it); unset: none allowed.",
    )
    group_commit_replay_wal_retry_num: int = Field(
        10,
        ge=0,
        description="Group commit: replays of an acknowledged async load whose group failed for a reason other "
        "than its data, before its WAL entry is moved to wal/tmp/ and the load aborted (Doris: 10).",
    )
    group_commit_replay_wal_retry_interval_seconds: float = Field(
        1.0,
        gt=0,
        description="Group commit: wait before the first replay of a failed async load; doubles per failure, "
        "at most 300 s (Doris: 5).",
    )
    sql_max_body_bytes: int = Field(
        100 * 1024 * 1024,
        ge=1024,
        description="Largest body of an HTTP SQL request (Doris's jetty_server_max_http_post_size, 100 MB).",
    )
    sql_max_statements: int = Field(100, description="Most `;`-separated statements in one SQL request.")
    sql_max_string_bytes: int = Field(
        10 * 1024 * 1024, description="Largest value a string-growing SQL function (repeat, lpad, concat...) may make."
    )
    sql_max_generated_rows: int = Field(
        10_000_000, description="Most rows of the range table function and elements of array_repeat/sequence."
    )
    sql_max_result_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024,
        description="Largest result set of one SQL query (HTTP or MySQL), estimated from its values; a larger one "
        "is refused before its rows are collected.",
    )
    mysql_max_result_rows: int = Field(
        1_000_000, description="Most rows of one MySQL-protocol result set; a larger one is refused."
    )
    mysql_max_connections: int = Field(
        1024, description="Most concurrent MySQL-protocol connections (Doris's qe_max_connection)."
    )
    mysql_handshake_timeout_seconds: float = Field(
        10.0, description="A MySQL client must finish its handshake (login) within this many seconds."
    )
    login_max_failures: int = Field(
        10, description="Failed logins from one address before its logins are refused for a while; 0: no limit."
    )
    catalog_pool_size: int = Field(
        10,
        ge=8,
        description="With a PostgreSQL catalog: the most connections this server opens to the database, shared "
        "out among the store's writes and reads, leases and version order, and the Iceberg catalog; a request "
        "that finds them all busy waits for one.",
    )
    login_lock_seconds: float = Field(
        60.0, description="How long failed logins count, and how long an address is refused after too many."
    )
    csv_inline_max_bytes: int = Field(
        16 * 1024,
        description="A CSV stream-load body of at most this many bytes (and `csv_inline_max_lines` lines) is split by "
        "the server and handed to Spark as an inline table (no file scan); -1: never.",
    )
    csv_inline_max_lines: int = Field(
        256,
        ge=0,
        description="Most lines of a CSV body handed to Spark inline (and rows of an INSERT ... VALUES written "
        "without Spark's file commit).",
    )
    csv_parquet_min_bytes: int = Field(
        1024 * 1024,
        ge=0,
        description="A CSV stream-load body of at least this many bytes is split by the server (pyarrow) into a "
        "Parquet file of its fields that Spark reads; bodies between the two sizes are split by Spark.",
    )

    def exposure_problem(self) -> str | None:
        """Why these settings must not serve, or None: root's empty password is for loopback only."""
        if self.root_password.get_secret_value() or is_loopback(self.host):
            return None
        return (
            f"refusing to listen on {self.host} while root has an empty password: anyone who can reach the port "
            "could load, drop and read every table. Set SL_ROOT_PASSWORD, or listen on 127.0.0.1 (SL_HOST)."
        )

    @property
    def resolved_data_dir(self) -> Path:
        return _resolved(self.data_dir)

    def input_limits(self) -> InputLimits:
        """The caps every load of this server applies to its input, and the sizes that pick a CSV body's path:
        each from the setting of the same name."""
        return InputLimits(**self.model_dump(include=set(InputLimits.model_fields)))

    @property
    def resolved_shared_dir(self) -> Path:
        """Where everything Spark's executors read or write lives (the data dir unless `shared_dir` is set)."""
        return _resolved(self.shared_dir or self.resolved_data_dir)

    @property
    def scratch_dir(self) -> Path:
        """This server's own part of the shared dir: staged bodies, the group-commit WAL and group payloads.

        One server (a SQLite store): the shared dir itself. Several servers on one PostgreSQL store share the
        shared dir, and each clears its staging at start and replays its WAL: each gets `servers/<name>`, named
        by its host and data dir (stable across restarts, distinct between servers)."""
        if not self.resolved_store_uri.startswith("postgresql"):
            return self.resolved_shared_dir
        return self.resolved_shared_dir / "servers" / self.server_name

    @property
    def server_name(self) -> str:
        """This server's name among several: its host and data dir (stable across its restarts, distinct between
        servers, which each have a data dir of their own)."""
        digest = hashlib.sha256(str(self.resolved_data_dir).encode()).hexdigest()[:12]
        return f"{socket.gethostname()}-{digest}"

    @property
    def staging_dir(self) -> Path:
        """Staged bodies (and the Parquet files a CSV body is split into): executors read them."""
        return self.scratch_dir / "staging"

    @property
    def resolved_warehouse(self) -> Path:
        """The local warehouse folder (`warehouse_uri` names a remote one, which has none)."""
        if isinstance(self.warehouse, str):
            raise ValueError(f"the warehouse {self.warehouse} is not a local folder")
        return (self.warehouse or self.resolved_shared_dir / "warehouse").expanduser().resolve()

    @property
    def warehouse_uri(self) -> str | None:
        """A remote warehouse (`hdfs:`, `s3a:`, `s3:`) as written; None for a local one."""
        return self.warehouse if isinstance(self.warehouse, str) else None

    def warehouse_storage(self) -> WarehouseStorage:
        """How the server reaches the warehouse's files (`tables/warehouse.py`)."""
        if self.warehouse_uri is not None:
            return WarehouseStorage.of(self.warehouse_uri)
        return WarehouseStorage.of(self.resolved_warehouse, via_arrow=self.warehouse_via_arrow_fs)

    @property
    def resolved_catalog_uri(self) -> str:
        return self.catalog_uri or f"sqlite:///{self.resolved_data_dir / 'catalog.db'}"

    @property
    def resolved_store_uri(self) -> str:
        """Where the server's own records live (leases and version order; labels and transactions, users, jobs):
        the catalog's PostgreSQL database when the catalog is on PostgreSQL (several servers share it), else
        the SQLite file `transactions.db` in the data dir."""
        uri = self.resolved_catalog_uri
        if uri.startswith("postgresql"):
            return uri
        return f"sqlite:///{self.resolved_data_dir / 'transactions.db'}"


@functools.lru_cache(maxsize=64)
def _resolved(path: Path) -> Path:
    """`path` made absolute with its links resolved, once per path: every request asks for the staging dir,
    and resolving it walked the path with a system call per part (~5% of a busy event loop's time)."""
    return path.expanduser().resolve()


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses; a wildcard (0.0.0.0, ::) or any other name is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
