# baton's build. `make run` runs the example; `make test` runs every test.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: bench-gateway bench-ingress all build run test testdeps kubebin h2spec vet fmt-check fuzz stress bench attacks bench-kube conformance image clean

all: build

# baton is built static (no cgo): no libc to load, one file to deploy; and
# without urfave/cli's man-page generator, which baton does not use.
# `make build OPENSSL=1` builds it with cgo instead, so that RSA keys sign
# in OpenSSL 3's libcrypto, opened at run time (internal/opensslrsa): about
# three times the full RSA handshakes per second (docs/benchmarks.md).
TAGS    := urfave_cli_no_docs
CGO     := 0
ifeq ($(OPENSSL),1)
TAGS    := $(TAGS),openssl
CGO     := 1
endif

build:
	CGO_ENABLED=$(CGO) $(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o bin/baton ./cmd/baton
	$(GO) build -o bin/backend ./integration/cmd/backend

# The main job: the supervisor with examples/baton.yaml, proxying to a
# small local backend that this starts too. ^C stops both.
run: build
	./scripts/run-example.sh

# The fuzzers, by package: the ipc decoder, the HTTP/1.1 parsers
# differentially against net/http, HTTP/2 request heads on their way to
# HTTP/1.1 against net/http, HTTP/2 header blocks against x/net's
# ReadMetaHeaders, and the PROXY protocol parser against
# go-proxyproto (docs/security.md).
FUZZERS := ./ipc:FuzzDecode ./proxy/h1:FuzzRequest ./proxy/h1:FuzzResponse ./proxy:FuzzH2Request ./proxy/h2:FuzzConn ./proxy/h2:FuzzHeaderBlock ./proxy/proxyproto:FuzzParse ./internal/metrics:FuzzLabelValue ./proxy:FuzzAppendJSONString ./proxy:FuzzClientHello ./proxy:FuzzH2Backend
FUZZTIME ?= 10m

# Every test, with the race detector: unit tests, a short run of each
# fuzzer, and the integration tests that run the real binary (the
# Kubernetes ones against a real kube-apiserver and etcd, built once; the
# HTTP/2 ones with h2spec, built once).
test: vet fmt-check testdeps kubebin h2spec
	$(GO) test -race -count=1 -timeout 14m ./...
	CGO_ENABLED=1 $(GO) test -race -count=1 -tags openssl -run 'TLS|Sign' ./internal/opensslrsa/ ./proxy/
	$(MAKE) --no-print-directory fuzz FUZZTIME=10s

# The zero-drop tests on a starved machine (scripts/stress.sh): ROUNDS
# rounds of TestHandoffsUnderLoad (or RUN's tests), two processes at once
# beside a busy loop per core. About 5 minutes a round.
stress:
	./scripts/stress.sh

# HAProxy, ip and unshare, from Debian's packages when missing.
testdeps:
	./scripts/testdeps.sh

# kube-apiserver and etcd for the Kubernetes integration tests, built from
# the Go module proxy into .cache/kubebin when missing.
kubebin:
	./scripts/kubebin.sh

# h2spec, the HTTP/2 conformance suite, built from the Go module proxy
# into .cache/tools when missing.
h2spec:
	./scripts/h2spec.sh

vet:
	$(GO) vet ./...
	CGO_ENABLED=1 $(GO) vet -tags openssl ./internal/opensslrsa/ ./proxy/

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Each fuzzer for FUZZTIME (make fuzz FUZZTIME=1h): scripts/fuzz.sh.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME) $(FUZZERS)

# Side by side with nginx and HAProxy (installed from Debian's packages when
# missing); writes docs/benchmarks.md, then its Gateway API section
# (bench-gateway), then its Ingress section (bench-ingress). BENCH_QUICK=1 for a short run.
bench: kubebin
	./scripts/bench.sh
	./scripts/bench-gateway.sh
	./scripts/bench-ingress.sh

# The Gateway API's figures on a real API server: a route change to
# routing with 1, 100 and 1,000 HTTPRoutes, churn under load, memory;
# written into docs/benchmarks.md.
bench-gateway: kubebin
	./scripts/bench-gateway.sh

# The Ingress controller's figures on a real API server: 1,000 Ingresses,
# a change to routing, 500 changes under load beside nginx reloaded as
# many times; written into docs/benchmarks.md.
bench-ingress: kubebin
	./scripts/bench-ingress.sh

# The HTTP/2 and slow-client attacks (Rapid Reset, MadeYouReset, clients
# that hang up, a dripped header block) against baton and nginx; writes
# their table into docs/security.md.
attacks:
	./scripts/attacks.sh

# From an EndpointSlice write to baton's routing, on a real API server,
# with 10 and 10,000 endpoints (docs/kubernetes.md has the figures).
bench-kube: kubebin
	$(GO) test -run '^$$' -bench EndpointSliceToRoute -benchtime 200x ./integration/kube/

# The Gateway API's upstream conformance suite, unmodified, against the
# real binary on a real API server (integration/conformance; docs/gateway.md
# says what the rig is). PROFILES: the profiles to run, a comma list;
# REPORT: where the suite writes its ConformanceReport.
PROFILES ?= GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS,GATEWAY-TCP
REPORT ?= $(CURDIR)/.cache/conformance/report.yaml
conformance: kubebin testdeps
	mkdir -p $(dir $(abspath $(REPORT)))
	cd integration/conformance && $(GO) vet ./... && $(GO) test -count=1 -timeout 60m -run '^TestConformance$$' . -args \
		-gateway-class=baton -conformance-profiles=$(PROFILES) -report-output=$(abspath $(REPORT)) \
		-organization=baton-proxy -project=baton -url=https://github.com/baton-proxy/baton \
		-version=$(VERSION) -contact=https://github.com/baton-proxy/baton/issues

# The container image (Dockerfile), with docker or podman, whichever is
# installed; `make image OPENSSL=1` the variant whose workers sign RSA keys
# in OpenSSL (the Dockerfile's openssl target).
IMAGE ?= baton:latest
image:
	@tool=$$(command -v docker || command -v podman) || { echo "make image: needs docker or podman"; exit 1; }; \
	$$tool build --build-arg VERSION=$(VERSION) $(if $(filter 1,$(OPENSSL)),--target openssl) -t $(IMAGE) .

clean:
	rm -rf bin
