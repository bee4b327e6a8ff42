# `make run` installs everything and starts the server on the embedded defaults;
# `make test` installs what the tests need, lints and type-checks, and runs the suite;
# `make test-fast` runs the unit tier only (no JVM, seconds); `make lint` is ruff and mypy alone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-full test-fast lint bench openapi clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# pydoris, a real Doris client the tests drive; --no-deps: its mysqlclient dependency needs C headers
	$(PY) -m pip install -q --no-deps 'pydoris>=1.2,<2'
	touch $(STAMP)

install: $(STAMP)
	@$(PY) -c "from app.java import check_java; check_java()" || (echo "Java 17+ is required: apt-get install openjdk-17-jre-headless" && exit 2)

run: install
	$(PY) -m app

# the mysql client and PostgreSQL tests run when those are there; as root on Debian, `make test` installs them
test: install lint
	@command -v mysql >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends default-mysql-client-core \
	  >/dev/null 2>&1 || echo "mysql client not installed: the tests that use it are skipped"
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql \
	  >/dev/null 2>&1 || echo "PostgreSQL not installed: the tests that use it are skipped"
	$(PY) -m pytest -q

# everything, with the tests marked `cluster` (minutes: a Spark standalone cluster, tests/test_spark_cluster.py)
# and `full` (longer runs of what `make test` covers briefly)
test-full: install lint
	$(PY) -m pytest -q -m "cluster or full or not (cluster or full)"

# the tests marked `unit` (tests/conftest.py marks every test from the fixtures it uses): no Spark, no server
test-fast: $(STAMP)
	$(PY) -m pytest -q -m unit

# ruff's lint rules and formatting, mypy strict (both configured in pyproject.toml)
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

bench: install
	$(PY) bench/bulk.py
	$(PY) bench/small.py
	$(PY) bench/mor.py
	$(PY) bench/compaction.py
	$(PY) bench/memory.py
	$(PY) bench/group_commit.py
	$(PY) bench/partitions.py
	$(PY) bench/queries.py

# regenerate openapi/openapi.json from the app (tests/test_openapi.py fails when it is stale)
openapi: install
	$(PY) -m app.openapi

clean:
	rm -rf $(VENV) data
