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

# The compiled build in this checkout (setup.py): the gateway's modules beside their sources as
# mypyc extensions; `make pure` removes them. `pip install -e .` alone stays pure.
compiled: pure  # from nothing: no module left from an earlier build beside its source
	IDEM_COMPILE=1 $(PY) setup.py --quiet build_ext --inplace

pure:
	rm -f gateway/_compiled.json
	find gateway -name '*.so' -delete

.PHONY: install test lint format compiled pure

# deploy/constraints.txt: the image's pinned dependencies, resolved for its Python (3.12).
PY312 ?= python3.12
constraints:
	rm -rf /tmp/idem-constraints && $(PY312) -m venv /tmp/idem-constraints
	IDEM_PURE=1 /tmp/idem-constraints/bin/pip install --quiet .  # the pins, not the compile
	{ sed -n '/^#/p' deploy/constraints.txt; \
	  /tmp/idem-constraints/bin/pip freeze --exclude idem-gateway --exclude pip; } > deploy/constraints.new
	mv deploy/constraints.new deploy/constraints.txt

.PHONY: constraints

# docs/console.png, the console README shows: a two-worker gateway's, from its browser test.
console-png:
	IDEM_CONSOLE_SCREENSHOT=$(CURDIR)/docs/console.png $(PY) -m pytest -n 0 \
		tests/test_console.py -k test_a_multi_worker_gateway_shows_every_workers_traffic

.PHONY: console-png
