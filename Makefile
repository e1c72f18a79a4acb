# Magnetar build targets. Tools used by `make proto` are pinned here and
# installed into .bin/ so that regeneration is reproducible.

GO            ?= go
BIN           := $(CURDIR)/.bin
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.1
PROTOC_VERSION             := 3.21.12
PROTO_FILES   := $(wildcard proto/*/*.proto)
# Packages that run goroutines: tested with the race detector (only: a
# second run without it would find nothing more). The others run
# without it: the tests against real processes, containers and the
# Kubernetes control plane, the commands, the autoscaler's pure decisions.
RACE_PKGS     := ./metastore/... ./bookie/... ./broker/... ./client/... ./internal/...
PLAIN_PKGS    := ./autoscaler/... ./cmd/... ./e2e/... ./proto/... ./tools/...
TEST_TIMEOUT  ?= 20m

.PHONY: all build image kube-tools test-kube test-pulsar-client-go test test-plain test-race test-e2e test-e2e-long mutate bench bench-peers bench-storage-ab bench-heal fuzz proto proto-check lint run tools clean

all: build

build:
	$(GO) build -o $(BIN)/magnetar ./cmd/magnetar

# Container images, from scratch (deploy/docker/Dockerfile): static
# binaries built here, copied in. IMAGE_TAG names the magnetar image; the
# etcd image is tagged with the etcd version go.mod pins.
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE        ?= magnetar/magnetar
IMAGE_TAG    ?= dev
ETCD_IMAGE   ?= magnetar/etcd
ETCD_VERSION := $(shell $(GO) list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
IMAGE_CTX    := $(BIN)/image
DOCKER       ?= docker

image:
	rm -rf $(IMAGE_CTX)
	mkdir -p $(IMAGE_CTX)/data
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w -X main.version=$(VERSION)" -o $(IMAGE_CTX)/magnetar ./cmd/magnetar
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w" -o $(IMAGE_CTX)/etcd go.etcd.io/etcd/server/v3
	cp deploy/docker/passwd deploy/docker/group $(IMAGE_CTX)/
	$(DOCKER) build -q -f deploy/docker/Dockerfile --target magnetar -t $(IMAGE):$(IMAGE_TAG) $(IMAGE_CTX)
	$(DOCKER) build -q -f deploy/docker/Dockerfile --target etcd -t $(ETCD_IMAGE):$(ETCD_VERSION) $(IMAGE_CTX)

# The test command in README.md: generated code check, vet, the
# Kubernetes tools (built first, while nothing else runs: about 6.5
# minutes of both cores when cold, seconds when current), then every test,
# two runs side by side: the concurrent packages under the race detector,
# the rest (e2e included) without it; last the Kubernetes tests (e2e/kube,
# build tag "kube"), alone, as their control plane wants the machine.
# Without cgo, as the images are built: the e2e tests' binaries and `make
# image` then share the build cache with the tests (the race detector
# needs cgo, and has a cache of its own anyway).
test: proto-check
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet -tags kube ./e2e/kube/
	$(MAKE) kube-tools
	scripts/ensure-chromium.sh
	$(MAKE) -j2 --output-sync=target test-plain test-race
	$(MAKE) -j2 --output-sync=target test-kube test-pulsar-client-go

# Test artifacts (the console's screenshots) go to test-output/.
test-plain:
	mkdir -p $(CURDIR)/test-output
	CGO_ENABLED=0 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -artifacts -outputdir $(CURDIR)/test-output $(PLAIN_PKGS)

test-race:
	CGO_ENABLED=1 $(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) $(RACE_PKGS)

# The Kubernetes tools (kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok, helm, kubeconform) from tools/kube, and the tests
# of the chart and the autoscaler on them.
kube-tools:
	scripts/kube-tools.sh $(BIN)/kube

# pulsar-client-go's own tests (the list in the file) against a
# standalone, in a network namespace of their own: they expect ports 6650
# and 8080 (docs/pulsar-compatibility.md).
test-pulsar-client-go:
	timeout --foreground 15m scripts/pulsar-client-go-tests.sh --netns --strict --list scripts/pulsar-client-go-ci.txt

test-kube: kube-tools
	$(GO) test -tags kube -count=1 -timeout 20m -v ./e2e/kube/

# Only the tests against real processes (part of `make test` too): the
# fault suite runs its short profile (about 25 s per fault type). Each
# scenario writes its history and checker report under $$MAGNETAR_E2E_OUT
# (kept), or under /tmp/magnetar-e2e (kept if it fails).
test-e2e:
	$(GO) test -count=1 -timeout 30m -v ./e2e/...

# The fault suite's long profile: 5 minutes of faults per fault type
# (30,000 sends each), about 50 minutes in all; every history is kept.
E2E_OUT ?= /tmp/magnetar-e2e-long
test-e2e-long:
	MAGNETAR_E2E_PROFILE=long MAGNETAR_E2E_OUT=$(E2E_OUT) $(GO) test -count=1 -timeout 120m -v -run 'TestFaults|TestBookies' ./e2e/

# The mutation check (docs/testing.md): each one-line mutation of an
# invariant in tools/mutate/mutations.tsv against the tests that should
# catch it; fails when one survives, and records the result in
# docs/testing.md. Slow (about 10 minutes on 2 cores), so not part of
# `make test`. MUTATE_FLAGS="-only dedup-resend-at-persisted-stored,fencing"
# runs some (by id or invariant) and leaves docs/testing.md alone.
MUTATE_FLAGS ?=
mutate:
	$(GO) run ./tools/mutate -go $(GO) -list tools/mutate/mutations.tsv -report docs/testing.md $(MUTATE_FLAGS)

# The self-healing scenarios are left to bench-heal: each is a whole
# cluster's life, not a loop over b.N.
bench:
	$(GO) test -p 1 -run '^$$' -bench . -skip 'ReReplication|NewBookieShare' -benchtime 2s -timeout 60m ./bookie/...

# Magnetar side by side with Redis Streams and NATS JetStream in one run
# (docs/benchmarks.md, "Side by side"), about 15 minutes; the table goes to
# bench/out/side-by-side.md.
bench-peers:
	scripts/bench-peers.sh

# Pebble-only bookies against the entry log (--entry-log), alternating.
bench-storage-ab:
	scripts/bench-storage-ab.sh

# Self-healing (docs/benchmarks.md, "Autorecovery (issue 11)"), about 4
# minutes: re-replication after losing a bookie, produce latency during
# it, a new bookie taking its share.
bench-heal:
	$(GO) test -run '^$$' -bench ReReplication -benchtime 1x -timeout 30m ./bookie/autorecovery/
	$(GO) test -run '^$$' -bench NewBookieShare -benchtime 1x ./bookie/ledger/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeEntry -fuzztime 30s ./bookie/internal/storage
	$(GO) test -run '^$$' -fuzz FuzzDecodeLedgerState -fuzztime 30s ./bookie/internal/storage
	$(GO) test -run '^$$' -fuzz FuzzDecodeKey -fuzztime 30s ./bookie/internal/storage
	$(GO) test -run '^$$' -fuzz FuzzParseLedgerKey -fuzztime 30s ./metastore
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 30s ./proto/entry
	$(GO) test -run '^$$' -fuzz FuzzSplitBatch -fuzztime 30s ./proto/entry
	$(GO) test -run '^$$' -fuzz FuzzDecompress -fuzztime 30s ./proto/entry
	$(GO) test -run '^$$' -fuzz FuzzDecodeMetadata -fuzztime 30s ./proto/entry
	$(GO) test -run '^$$' -fuzz FuzzAddEntries -fuzztime 30s ./internal/wirecodec
	$(GO) test -run '^$$' -fuzz FuzzProduce -fuzztime 30s ./internal/wirecodec
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime 30s ./broker/internal/pulsarwire
	$(GO) test -run '^$$' -fuzz FuzzDecodeSend -fuzztime 30s ./broker/internal/pulsarwire

run: build
	$(BIN)/magnetar standalone

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tools: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
	@scripts/ensure-protoc.sh $(PROTOC_VERSION)

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

# Regenerates the committed Go code from proto/*/*.proto.
proto: tools
	PATH=$(BIN):$$PATH protoc -I proto \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		$(patsubst proto/%,%,$(PROTO_FILES))

# Fails when the committed generated code differs from what `make proto` makes.
proto-check: tools
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	PATH=$(BIN):$$PATH protoc -I proto \
		--go_out=$$tmp --go_opt=paths=source_relative \
		--go-grpc_out=$$tmp --go-grpc_opt=paths=source_relative \
		$(patsubst proto/%,%,$(PROTO_FILES)); \
	for f in $$(cd $$tmp && find . -name '*.go'); do \
		cmp -s $$tmp/$$f proto/$$f || { echo "proto/$$f is stale: run make proto"; exit 1; }; \
	done; \
	for f in $$(cd proto && find . -name '*.pb.go'); do \
		[ -f $$tmp/$$f ] || { echo "proto/$$f has no .proto source: remove it"; exit 1; }; \
	done; \
	echo "generated code is up to date"

clean:
	rm -rf $(BIN)
