# RobinHood: tail-latency-aware caching. `make demo` runs the testbed,
# `make test` runs every test. Both install what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := build

GO      ?= go
VENV    := .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
TOOLS   := .tools/bin
PROTOS  := $(wildcard proto/robinhood/v1/*.proto)
# The Python distributions: robinhood (the root pyproject.toml: controller, testbed and
# what they share) and robinhood-report (the reporter an application server imports).
PYPKGS  := . reporter/python
GOTEST_FLAGS ?= -count=1 -timeout 15m
# PYTEST_WORKERS: processes the Python tests are spread over (pytest-xdist; a test file
# stays in one process, so its module fixtures start once); 0 runs them in pytest's own
PYTEST_WORKERS ?= auto
PYTEST_FLAGS ?= -q -p no:cacheprovider --timeout 600 --durations=15 -n $(PYTEST_WORKERS) --dist loadfile

# DEMO_FLAGS: extra robinhood-testbed flags, e.g. DEMO_FLAGS='--out runs/mine --prometheus'
# SIM_FLAGS: extra flags of sim-demo, e.g. SIM_FLAGS='--out runs/sim --sample 0.5'

.PHONY: hooks test-busy collector-check compose-check build test demo sim-demo hedging zoo oracle-check paper paper-everykey paper-window paper-full fuzz chaos rbc-demo proto proto-check schema schema-check go-test py-test vet fmt deps sysdeps venv clean bench

comma := ,
space := $(empty) $(empty)

## build: every Go binary into bin/, and the docs' policy tables from the registries
build: deps
	$(GO) build -o bin/ ./...
	@# 10: schema/policies.schema.yaml changed, and the binaries embed it.
	@$(PY) scripts/genschema.py --registries; rc=$$?; \
	  if [ $$rc = 10 ]; then $(GO) build -o bin/ ./...; elif [ $$rc != 0 ]; then exit $$rc; fi

## deps: Go modules, the Python virtualenv, the Debian packages the tests use, the git hooks
deps: sysdeps venv hooks
	$(GO) mod download

## hooks: the commit-msg hook (a subject of at most 72 characters, the detail in the body)
hooks:
	@if [ -d .git ] && [ "$$(git config core.hooksPath)" != .githooks ]; then \
	  git config core.hooksPath .githooks && echo "installed .githooks (git config core.hooksPath .githooks)"; fi

sysdeps:
	@scripts/ensure-sysdeps.sh memcached protoc redis-server prometheus docker-compose

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt $(addsuffix /pyproject.toml,$(PYPKGS))
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q -r requirements.txt
	@# The four distributions the root one replaced, in a virtualenv made before it.
	@$(PIP) uninstall -q -y robinhood-proto robinhood-common robinhood-controller robinhood-testbed 2>/dev/null || true
	$(PIP) install -q --no-deps $(addprefix -e ,$(PYPKGS))
	touch $@

## test: Go and Python tests (unit, integration with real processes); the Go and the
## Python suites run side by side (each waits on real processes part of the time), each
## one's output printed when it ends
test: build vet proto-check schema-check layout-check
	@$(MAKE) --no-print-directory -j2 --output-sync=target go-test py-test

## test-busy: the whole suite while every core is kept busy by a loop (scripts/busy.sh;
## HOGS=N loops); it must pass as on a quiet machine, only slower
test-busy:
	scripts/busy.sh $(MAKE) test

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

go-test:
	$(GO) test $(GOTEST_FLAGS) ./...

py-test: venv
	$(PY) -m pytest $(PYTEST_FLAGS) lib/python/tests controller/tests experiment/testbed/tests reporter/python/tests tests

## proto: regenerate the committed Go and Python code from proto/
proto: venv
	@scripts/ensure-sysdeps.sh protoc
	scripts/genproto.sh .

## proto-check: fail when the committed generated code is stale
proto-check: venv
	@scripts/ensure-sysdeps.sh protoc
	scripts/genproto.sh --check

## schema: regenerate what comes from schema/ (the Python package's copy, the docs tables)
schema: venv build
	$(PY) scripts/genschema.py

## schema-check: fail when something generated from schema/ is stale
schema-check: venv build
	$(PY) scripts/genschema.py --check

## layout: regenerate the layout table of docs/architecture.md from the tree
layout:
	python3 scripts/genlayout.py

## layout-check: fail when that table is stale (a folder added, moved or without a description)
layout-check:
	python3 scripts/genlayout.py --check

## bench: the Go benchmarks (numbers go to docs/benchmarks.md)
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

## chaos: 20 minutes of the testbed while the RBC server, the controller, memcached and backend
## replicas are killed and hung at seeded random times (docs/reliability.md); CHAOS_FLAGS adds flags
chaos: build venv
	$(VENV)/bin/robinhood-testbed chaos --experiment examples/chaos.yaml $(CHAOS_FLAGS)

## demo: the local testbed: the arms of examples/demo.yaml (robinhood, static, shared)
demo: build
	$(VENV)/bin/robinhood-testbed compare --experiment examples/demo.yaml $(DEMO_FLAGS)

## sim-demo: the demo experiment in the simulator (bin/sim), every allocation policy and the shared cache
sim-demo: build venv
	$(VENV)/bin/robinhood-testbed compare --engine sim --experiment examples/demo.yaml --policies all $(SIM_FLAGS)

## hedging: the replicated-backend reproductions in the simulator's hedging bench (docs/hedging.md):
## LÆDGE §3-4, SingleR §5 (the fit, then the policy on the independent and queueing workloads) and
## DAS §6; each experiment's table in runs/hedging/<name>/table.md, DAS's gains per model in
## runs/hedging/das-gains.md (about 9 minutes on 2 cores)
HEDGING_EXPERIMENTS = laedge laedge-collapse laedge-dhedge-long singler-independent singler-queueing das das-purge-delay das-purge-cost das-response
HEDGING_OUT ?= runs/hedging
hedging: build
	go test -count=1 -run TestFitSingleRReproducesThePaperOnPareto -v ./lib/dispatch/ | grep -E "d\*|^(ok|FAIL)"
	@for e in $(HEDGING_EXPERIMENTS); do \
		bin/sim hedging --experiment examples/hedging/$$e.yaml --out $(HEDGING_OUT)/$$e || exit 1; echo; done
	python3 scripts/hedging_das_gains.py $(HEDGING_OUT) | tee $(HEDGING_OUT)/das-gains.md

## zoo: every allocation policy and the shared cache on scenarios drawn from the zoo's family, on
## two key sources (the Zipf keys of examples/zoo.yaml, the real ARC streams of examples/zoo-real.yaml)
## and three topologies (1, 2 and 4 app servers), the evaluation seeds, in the simulator (on a scenario
## the oracle's analysis calls infeasible, only the recommended policy, checking the class); the summary
## in runs/zoo/zoo.md, the figure runs/zoo/zoo.png (docs/zoo.md; time in docs/benchmarks.md)
ZOO_OUT ?= runs/zoo
ZOO_SEEDS ?= 1000-1059
ZOO_EXPERIMENTS ?= examples/zoo.yaml,examples/zoo-real.yaml
zoo: build venv
	$(VENV)/bin/robinhood-testbed zoo --experiment $(ZOO_EXPERIMENTS) --app-servers 1,2,4 --seeds $(ZOO_SEEDS) \
		--policies all --cache-modes partitioned,shared --infeasible check --jobs 2 --out $(ZOO_OUT)

## oracle-check: the oracle's model against the simulator, per phase, with 1, 2 and 4 app servers and
## phases of 5 s to 3 minutes (scripts/oracle_model_check.py; docs/algorithms.md)
oracle-check: build venv
	$(VENV)/bin/python scripts/oracle_model_check.py --out runs/oracle-model-check

## paper: the paper's experiments at its scale in the simulator (examples/paper): each file's
## compare arms (compare.policies: robinhood, relief, static and the paper's competitors,
## not the oracle; and the shared cache) x every scenario x 3 seeds, two at a time; report in runs/paper/matrix.md
PAPER_SCENARIOS = spikes quick-ramp slow-ramp quick-ramp-correlated slow-ramp-correlated random-walk
PAPER_OUT ?= runs/paper
paper: build venv
	$(VENV)/bin/python scripts/paper-experiments.py --check
	$(VENV)/bin/robinhood-testbed matrix --seeds 1,2,3 --jobs 2 --out $(PAPER_OUT) \
		--experiments $(subst $(space),$(comma),$(foreach s,$(PAPER_SCENARIOS),examples/paper/$(s).yaml)) $(PAPER_FLAGS)

## paper-everykey: the headline figures without key or request sampling: every key and every
## request of one app server (the miniature's fluid backends; about 30 minutes an arm, 4.3 GB)
paper-everykey: build venv
	$(VENV)/bin/robinhood-testbed matrix --seeds 1 --jobs 2 --out runs/paper-everykey \
		--experiments examples/paper/spikes.yaml,examples/paper/quick-ramp.yaml \
		--policies robinhood,lama++ --cache-modes partitioned,shared \
		--sample 1 --request-sample 0.0625 --apps 1 $(PAPER_FLAGS)

## paper-full: one paper experiment (spikes, RobinHood, seed 1) with no sampling at all:
## 16 app servers, every key and request, every backend queue (about 11.5 billion queries)
paper-full: build venv
	$(VENV)/bin/robinhood-testbed run --engine sim --experiment examples/paper/spikes.yaml --policy robinhood \
		--full --out runs/paper-full $(PAPER_FLAGS)

## paper-window: the miniature's error against the exact engine at the paper's scale, on a
## 22-minute window of the spikes (examples/paper/spike-window.yaml), robinhood and static:
## exact (every app server, key, request and backend queue; seed 1, one arm at a time, about
## 30-35 minutes and 8-10 GB an arm), at make paper's sample (seeds 1-3) and with every key and
## request of one app server (seed 1)
WINDOW_ARGS = --experiments examples/paper/spike-window.yaml --policies robinhood,static --cache-modes partitioned
paper-window: build venv
	$(VENV)/bin/robinhood-testbed matrix $(WINDOW_ARGS) --seeds 1 --jobs 1 --full --out runs/paper-window-exact $(PAPER_FLAGS)
	$(VENV)/bin/robinhood-testbed matrix $(WINDOW_ARGS) --seeds 1,2,3 --jobs 2 --out runs/paper-window-mini $(PAPER_FLAGS)
	$(VENV)/bin/robinhood-testbed matrix $(WINDOW_ARGS) --seeds 1 --jobs 2 --sample 1 --request-sample 0.0625 --apps 1 \
		--out runs/paper-window-everykey $(PAPER_FLAGS)

## fuzz: every fuzz target for FUZZTIME each (make test runs only their seed corpora),
## and the Python readers' property tests with many more examples
FUZZTIME ?= 60s
FUZZ_TARGETS = ./lib/trace:FuzzParse ./lib/trace:FuzzParseFast ./rbcserver/server:FuzzValidateBatch \
	./appserver/cache:FuzzKey ./backends/capacity:FuzzParsePatch ./lib/config:FuzzParseTopology
fuzz: deps
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) || exit 1; done
	ROBINHOOD_FUZZ=1 $(VENV)/bin/python -m pytest -q lib/python/tests/test_topology_fuzz.py

## compose-check: docker-compose.yml under a real engine (podman, as root): the
## project's images built from deploy/docker/ unchanged, the demo's stack up for a
## minute, the RBC, a resize and every scrape target checked, then torn down
## (scripts/compose-check.sh; stand-ins for the base images where no registry is)
compose-check: deps
	scripts/compose-check.sh

## collector-check: build a real OpenTelemetry Collector with its own builder
## (deploy/otel/builder.yaml; about 90 s, cached in .tools/) and run the documented
## pipeline, deploy/otel/collector.yaml, between the OpenTelemetry SDK and the RBC server
OTELCOL_BUILDER_VERSION = v0.165.0
collector-check: deps
	GOBIN=$(CURDIR)/$(TOOLS) $(GO) install go.opentelemetry.io/collector/cmd/builder@$(OTELCOL_BUILDER_VERSION)
	test -x .tools/otelcol/otelcol-robinhood -a .tools/otelcol/otelcol-robinhood -nt deploy/otel/builder.yaml || \
		(cd deploy/otel && $(CURDIR)/$(TOOLS)/builder --config builder.yaml)
	ROBINHOOD_OTELCOL=$(CURDIR)/.tools/otelcol/otelcol-robinhood $(GO) test -count=1 -run TestCollectorPipeline -v ./tests/e2e/

## rbc-demo: the RBC server alone, fed by a synthetic load
rbc-demo: build
	scripts/rbc-demo.sh

clean:
	rm -rf bin .tools
