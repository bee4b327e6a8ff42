# `make run` installs everything and starts the server on the embedded defaults;
# `make test` installs what the tests need and runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)
	@$(PY) -c "from app.java import check_java; check_java()" || (echo "Java 17+ is required: apt-get install openjdk-17-jre-headless" && exit 2)

run: install
	$(PY) -m app

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) bench/bulk.py
	$(PY) bench/small.py
	$(PY) bench/mor.py
	$(PY) bench/compaction.py
	$(PY) bench/memory.py

clean:
	rm -rf $(VENV) data
