# The two commands the README starts with, and a few more.
export CARGO_TARGET_DIR ?= /var/tmp/quantykube-target

.PHONY: run cluster test deps build lint

deps:
	./deploy/local/install-deps.sh

build: deps
	cargo build --bin quantykube

## Starts a one-member cluster like `etcd` with no flags: clients on 127.0.0.1:2379.
run: build
	$(CARGO_TARGET_DIR)/debug/quantykube

## Starts three local members (see deploy/local/three-nodes.sh).
cluster: build
	./deploy/local/three-nodes.sh

## Runs every test: unit, integration (real processes, etcd-client, etcdctl, etcd 3.4),
## power losses and failing disks on real members (tests/crash, over crashfs; root and
## /dev/fuse), the simulation, the Docker tests (image, compose, chaos; skipped without
## Docker), the Helm chart rendered and validated, and the benchmark report's own
## scripts. Every suite runs even after another failed (tests/run-all.sh).
test: deps
	./tests/run-all.sh

.PHONY: crash-soak

## The power-loss scenarios again and again (docs/durability.md): ROUNDS power losses
## per scenario (default 100), each scenario on its own.
ROUNDS ?= 100
crash-soak: deps
	cargo build --bin quantykube-planted --features planted-bugs
	QK_CRASH_ROUNDS=$(ROUNDS) cargo test --test crash -- --test-threads=1 --nocapture

.PHONY: fuzz fuzz-seeds

## Every fuzz target for FUZZ_SECONDS each (default 60), or only FUZZ_TARGETS (names in
## fuzz/fuzz_targets/); see docs/security.md. `make test` only replays the corpora.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: deps
	./fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

## The seed corpora, made again (never edited by hand).
fuzz-seeds: deps
	cargo run -p quantykube-fuzz-targets --example seeds
	./fuzz/seed-etcd-snapshot.sh

## fmt, clippy, and our own .proto files against the API style guide (tools/proto-lint;
## etcd's protos under proto/etcd are etcd's and exempt).
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo run -q -p proto-lint -- --include proto proto/quantykube

.PHONY: image docker-test

## Builds the container image quantykube:dev FROM scratch out of the debug binary
## (deploy/image/build.sh; `make image PROFILE=release` for the optimised one, IMAGE=tag).
PROFILE ?= debug
image: deps
	./deploy/image/build.sh $(PROFILE)

## The Docker tests (tests/docker): the image, the compose cluster, chaos under load.
## They print SKIPPED and pass where `docker info` fails.
docker-test: deps
	cargo test --test docker -- --test-threads=1 --nocapture

.PHONY: helm-test

## Renders the Helm chart (deploy/helm/quantykube) with Helm's Go SDK from PyPI and
## validates every object against Kubernetes' schemas (tests/helm/run.sh; needs python3).
helm-test:
	./tests/helm/run.sh
