# rainmaker: the two commands of the README are `make demo` and `make test`.
# Every target is idempotent; stamps under .stamps/ skip work already done.

SHELL       := /bin/bash
# Python must keep its byte-code caches: a machine that sets PYTHONDONTWRITEBYTECODE (the
# development machine does) makes every process compile each module it imports from
# source, every time. The suite starts hundreds of them (the CLI, ansible-playbook, the emulator,
# the agents): 0.6 to 0.9 s of CPU more each, on two shared cores.
unexport PYTHONDONTWRITEBYTECODE
PYTHON      ?= python3
VENV        := .venv
BIN         := $(VENV)/bin
RM_CLI      := $(BIN)/rainmaker
STAMPS      := .stamps
BFRT_PROTO  := switch/bfrt/proto/bfruntime.proto
BFRT_STUBS  := switch/bfrt/_gen/.stamp

# Debian packages: network namespaces and veths (iproute2, ethtool), one sshd per
# emulated host (openssh-server), DPDK 22.11 (runtime, headers, testpmd), a C toolchain,
# libibverbs (rain-worker's --rdma ibverbs; it builds without it), RocksDB (its
# --handler rocksdb), memcached (a real server for rpc-client's memcached protocol) and
# libmemcached-tools (memaslap, the generator rpc-client's benchmark compares with),
# chromium and chromium-driver (the results browser's test drives a real browser).
APT_PACKAGES := iproute2 ethtool openssh-server openssh-client procps psmisc util-linux \
                iputils-ping tcpdump python3 python3-venv python3-dev gcc make pkg-config \
                dpdk dpdk-dev libdpdk-dev zlib1g-dev libibverbs-dev librocksdb-dev memcached \
                libmemcached-tools chromium chromium-driver

.PHONY: setup build demo test lint clean help figures-sim

help:
	@echo "make setup  - install Debian packages (as root), create $(VENV), install rainmaker"
	@echo "make demo   - the main job on an emulated testbed (runs setup first)"
	@echo "make test   - the test suite; integration tests need root (runs setup first)"
	@echo "make lint   - ansible-lint (production profile), ruff check and ruff format --check"
	@echo "make figures-sim - the papers' figures on the simulated testbed (Rain's and Rakaia's), about 6 minutes"

setup: $(STAMPS)/apt $(STAMPS)/venv build

# The DPDK programs (hosts/dpdk): rain-client, rain-worker; the BFRuntime stubs.
build: $(STAMPS)/apt $(BFRT_STUBS)
	@$(MAKE) --no-print-directory -s -j2 -C orchestrator/simulate/core
	@$(MAKE) --no-print-directory -s -j2 -C hosts/dpdk
	@$(MAKE) --no-print-directory -s -C hosts/rpc

# BFRuntime Python stubs (switch/bfrt/_gen, gitignored), generated with the venv's own
# grpcio-tools so they always match its protobuf runtime (switch/bfrt/_stubs.py says why).
# Importing switch.bfrt regenerates them too when missing or stale; this rule makes a
# build produce them up front.
$(BFRT_STUBS): $(BFRT_PROTO) switch/bfrt/_stubs.py $(STAMPS)/venv
	@$(BIN)/python -c 'import switch.bfrt'
	@touch $@

$(STAMPS)/apt: Makefile
	@mkdir -p $(STAMPS)
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=$$(for p in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "apt: installing $$(echo $$missing | tr '\n' ' ')"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  fi; \
	else echo "apt: not root, skipping Debian packages (integration tests will be skipped)"; fi
	@touch $@

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMPS)/venv: pyproject.toml $(BIN)/python
	@mkdir -p $(STAMPS)
	@echo "pip: installing rainmaker and its test extras into $(VENV)"
	@# --no-compile: byte-compiling every module of ansible, pandas and the rest took half
	@# of the install (23 of 43 s); Python compiles what is imported, once, on first use
	@$(BIN)/python -m pip install -q --no-compile -e '.[test]' > $(STAMPS)/pip.log 2>&1 || { cat $(STAMPS)/pip.log; exit 1; }
	@touch $@

# The demo builds its own testbed in a free slot and names its inventory (the path
# `testbed up` prints) in every later command: a testbed someone already has up, in
# slot 0 or any other, is neither used nor stopped nor taken down.
demo: setup
	@echo "== rainmaker demo: Rain on an emulated testbed (1 client, 2 workers, a software switch,"
	@echo "   all on this machine), provisioned with Ansible, then experiments/demo.yaml: 4 loads,"
	@echo "   analysed and plotted. 15 to 20 minutes on 2 cores, after setup."
	@out=$$($(RM_CLI) testbed up --clients 1 --workers 2 --slot free) || exit $$?; \
	inv=$${out#inventory: }; echo "$$out"; \
	[ -f "$$inv" ] || { echo "demo: \`testbed up\` printed no inventory path" >&2; exit 1; }; \
	{ $(RM_CLI) provision -i "$$inv" && $(RM_CLI) run experiments/demo.yaml -i "$$inv" --results results; \
	  rc=$$?; $(RM_CLI) switch stop -i "$$inv" >/dev/null 2>&1; $(RM_CLI) testbed down -i "$$inv"; exit $$rc; }

# Three processes (the tests wait on SSH, Ansible and sweeps more than they compute: two
# kept two cores half busy), then the tests marked `alone` (they measure timing) by
# themselves, on a quiet machine: a niced CPU-bound process someone left running is
# paused meanwhile (tests/quiet_machine.py; RAINMAKER_TEST_PAUSE=0 leaves it be). Where
# the time went: the 15 slowest tests, and every test file's total.
test: setup
	$(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder -m "not alone" --durations=15 --file-durations=1000
	$(BIN)/python -m tests.quiet_machine -- $(BIN)/python -m pytest -m alone

# The papers' figures on the simulated testbed, every system each spec lists (Rain and
# the four baselines in 6a-c, 7 and 8; Rakaia's five queueing models in rakaia-sim*):
# each point 0.1 s of warm-up and 1 s of paper time, one repetition (~3 M exact samples
# per point at Rain's paper scale); fig10 keeps its spec's 5 s of phases. About 6 minutes
# on 2 cores; results/sim/<figure>/<run>/
# like any run. SIM_ARGS="--system rain ..." draws Rain alone.
FIGURES_SIM ?= fig1a fig1b fig6a fig6b fig6c fig7 fig8 fig9 fig11a fig11b fig11c rakaia-sim rakaia-sim-bimodal rakaia-sim-constant
SIM_ARGS    ?= --warmup 0.1 --measure 1 --repetitions 1
figures-sim: setup
	@# one command for all but fig10 (its own options): one progress bar, one ETA over them
	$(RM_CLI) simulate $(FIGURES_SIM:%=experiments/%.yaml) --results results/sim $(SIM_ARGS)
	$(RM_CLI) simulate experiments/fig10.yaml --results results/sim --system rain
	@# one page: every figure's claims judged at paper scale (the newest run of each)
	$(RM_CLI) claims --page results/sim/claims.md \
	  $$(for f in $(FIGURES_SIM) fig10; do ls -d results/sim/$$f/*/ | sort | tail -1; done) > results/sim/claims.txt
	@echo "claims: results/sim/claims.md (the tables: results/sim/claims.txt)"

lint: setup
	$(BIN)/ansible-lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) $(STAMPS) *.egg-info switch/bfrt/_gen
	$(MAKE) -C hosts/dpdk clean
	$(MAKE) -C hosts/rpc clean
	$(MAKE) -C orchestrator/simulate/core clean
