# The usual verbs. `make install test` is what CI does (see .ci/run).
PY ?= python

install:
	$(PY) -m pip install -e '.[test]'

test:
	$(PY) -m pytest

lint:
	ruff check .
	ruff format --check .
	mypy gateway

format:
	ruff format .
	ruff check --fix .

.PHONY: install test lint format
