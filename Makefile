# fencefs — the two commands a newcomer runs are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
VERSITYGW_VERSION := v1.8.0
# MinIO's last community commit (see integration/gateway.MinIOPinnedVersion)
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
BIN := bin
# Tests find the binaries through these (see integration/harness, integration/gateway).
export FENCEFS_BIN := $(CURDIR)/bin/fencefs
export FENCEFS_VERSITYGW := $(CURDIR)/bin/versitygw
export FENCEFS_MINIO := $(CURDIR)/bin/minio
export FENCEFS_FAILPOINT_BIN := $(CURDIR)/bin/fencefs-failpoints
export FENCEFS_DEMO_BIN := $(CURDIR)/bin/fencefs-demo
export FENCEFS_ETCD := $(CURDIR)/bin/etcd
export FENCEFS_PROMTOOL := $(CURDIR)/bin/promtool
# -race on every test process; the fencefs binary mounted by end-to-end tests is a normal build.
TESTFLAGS ?= -race
TEST_TIMEOUT ?= 50m
# ./integration runs as this many test processes side by side (.ci/gotest says why processes)
TEST_SHARDS ?= 3
PKGS ?= ./...
DURATION ?= 10m

.PHONY: all build run test deps servers lint bench torture clean pjdfstest

all: build

## build: bin/fencefs (and the demo driver, and the fault-injection build the tests use)
## (-buildvcs=auto records the commit for `fencefs version` even where GOFLAGS turns it off;
## go records none in a git worktree, whose .git is a file)
BUILDFLAGS ?= -buildvcs=auto
build:
	$(GO) build $(BUILDFLAGS) -o $(BIN)/fencefs ./cmd/fencefs
	$(GO) build $(BUILDFLAGS) -o $(BIN)/fencefs-demo ./integration/demo
	$(GO) build $(BUILDFLAGS) -tags failpoints -o $(BIN)/fencefs-failpoints ./cmd/fencefs

## the pinned Versity S3 gateway, the real S3 server of `make run` and the tests
$(BIN)/.versitygw-$(VERSITYGW_VERSION):
	@mkdir -p $(BIN)
	@echo "installing versitygw $(VERSITYGW_VERSION) into bin/ (go install; first time takes a few minutes)"
	GOBIN=$(CURDIR)/bin $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	@touch $@

$(BIN)/versitygw: $(BIN)/.versitygw-$(VERSITYGW_VERSION)

## the pinned MinIO server, the second S3 server the tests run against (single drive and 4 drives)
$(BIN)/.minio-$(MINIO_VERSION):
	@mkdir -p $(BIN)
	@echo "installing minio $(MINIO_VERSION) into bin/ (go install; first time takes about 4 minutes)"
	GOBIN=$(CURDIR)/bin $(GO) install github.com/minio/minio@$(MINIO_VERSION)
	@touch $@

$(BIN)/minio: $(BIN)/.minio-$(MINIO_VERSION)

## etcd, the coordinator of the `fencefs run --etcd` tests: built from tools/etcd, a separate
## module (the server's replace directives keep `go install` from building it; its version
## is pinned in tools/etcd/go.mod), so the product's go.mod holds only the etcd client
$(BIN)/etcd: tools/etcd/go.mod tools/etcd/go.sum tools/etcd/main.go
	@mkdir -p $(BIN)
	@echo "building etcd into bin/ from tools/etcd (first time takes about half a minute)"
	cd tools/etcd && $(GO) build -o $(CURDIR)/$(BIN)/etcd .

## promtool, which checks and unit-tests deploy/prometheus: the one on PATH, else taken out of
## Debian's prometheus package (apt-get download: the server is not installed, nor started)
$(BIN)/promtool:
	@mkdir -p $(BIN)
	@if command -v promtool >/dev/null 2>&1; then ln -sf "$$(command -v promtool)" $@; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  echo "extracting promtool from Debian's prometheus package into bin/"; \
	  tmp="$$(mktemp -d)"; \
	  if ! (cd "$$tmp" && apt-get download -qq prometheus 2>/dev/null) && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && (cd "$$tmp" && apt-get download -qq prometheus 2>/dev/null); \
	  fi; \
	  if ls "$$tmp"/prometheus_*.deb >/dev/null 2>&1; then \
	    dpkg-deb --fsys-tarfile "$$tmp"/prometheus_*.deb | tar -xO ./usr/bin/promtool > $@.tmp && chmod 0755 $@.tmp && mv $@.tmp $@; \
	  else echo "could not download Debian's prometheus package: install promtool (the deploy tests need it)"; fi; \
	  rm -rf "$$tmp"; \
	else echo "promtool is missing: install it (Debian: the prometheus package); the deploy tests need it"; fi

## deps: what the tests need from the system (fuse3 for fusermount3, Debian's ZooKeeper for the
## `fencefs run --zookeeper` tests), plus the gateway, MinIO, etcd and promtool, built side by
## side (the two servers take minutes the first time)
deps:
	@$(MAKE) --no-print-directory -j4 --output-sync=line servers
	@if ! command -v fusermount3 >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing fuse3 (fusermount3) with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3; \
	  else \
	    echo "fusermount3 is missing: install the fuse3 package (as root: apt-get install fuse3)"; \
	  fi; \
	fi
	@if [ ! -e /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing zookeeper (and a Java runtime) with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper; \
	  else \
	    echo "ZooKeeper is missing: install the zookeeper package (as root: apt-get install zookeeper)"; \
	  fi; \
	fi

servers: $(BIN)/versitygw $(BIN)/minio $(BIN)/etcd $(BIN)/promtool

## run: build, start a local S3 server, show a takeover with two mounts (./mnt, ./mnt-b), leave them up (Ctrl-C stops all)
run: build $(BIN)/versitygw
	@command -v fusermount3 >/dev/null 2>&1 || $(MAKE) --no-print-directory deps
	$(BIN)/fencefs-demo --bin $(BIN)/fencefs --gateway $(BIN)/versitygw --state .run --mountpoint mnt

## test: install what is missing, then run every unit and end-to-end test (`go test $(PKGS)`,
## the end-to-end package split into $(TEST_SHARDS) processes: .ci/gotest)
test: deps build lint
	GO="$(GO)" TESTFLAGS="$(TESTFLAGS)" TEST_TIMEOUT=$(TEST_TIMEOUT) TEST_SHARDS=$(TEST_SHARDS) bash .ci/gotest $(PKGS)

## lint: gofmt and go vet
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## bench: measure speed and memory against the raw S3 client and peers (s3fs, rclone mount);
## prints a markdown table and saves it under bench/results/. BENCHFLAGS=-quick for a smoke run.
## The listing workloads (ls -l, find) run a second time on MinIO, whose listings carry metadata.
BENCHFLAGS ?=
bench: build $(BIN)/versitygw $(BIN)/minio
	@for p in s3fs rclone; do \
	  if ! command -v $$p >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $$p with apt-get"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$p; \
	  fi; \
	done
	$(GO) run ./bench -bin $(BIN)/fencefs -gateway $(BIN)/versitygw $(BENCHFLAGS)
	$(GO) run ./bench -bin $(BIN)/fencefs -server minio -workloads lsl,find $(BENCHFLAGS)

## torture: the many-writers fencing checker, for longer (DURATION=30m)
torture: build $(BIN)/versitygw $(BIN)/minio
	FENCEFS_TORTURE_DURATION=$(DURATION) $(GO) test -run TestManyWritersTorture -timeout 0 -v ./integration/

## pjdfstest: the POSIX conformance suite (github.com/pjd/pjdfstest, built by you:
## autoreconf -ifs && ./configure && make pjdfstest) as root on a fresh bucket, mounted with
## --allow-other and without; prints the failing subtests per group (docs/POSIX.md). Not part of `make test`.
PJDFSTEST ?=
pjdfstest: build $(BIN)/versitygw
	$(GO) run ./integration/pjdfstest -pjdfstest "$(PJDFSTEST)" -bin $(BIN)/fencefs -gateway $(BIN)/versitygw -state .run/pjdfstest

clean:
	rm -rf $(BIN) .run
	$(GO) clean -testcache
