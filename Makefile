# Build, test and benchmark dmsc.

GO ?= go

.PHONY: build test bench bench-placement bench-vs-etcd image compose-secrets compose-up compose-down

build:
	$(GO) build -o bin/dmsc ./cmd/dmsc

test:
	$(GO) test -race ./...

# Scheduler throughput: allocate+release pairs per policy at 1k, 10k and
# 100k devices, multi-device requests, FragmentationAware, the command
# codec and snapshots, once each.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1s ./fsm/

# The placement figures BENCHMARKS.md quotes: every policy and request
# shape at 1k, 10k and 100k devices, 5 runs each, single-threaded, one
# cluster build per policy and size; take the medians of $(BENCH_OUT).
BENCH_OUT ?= bin/bench-placement.txt
POLICIES = FirstFit BestFit WorstFit RoundRobin PriorityBased LoadBalanced
SIZES = 1000 10000 100000
bench-placement:
	mkdir -p bin $(dir $(BENCH_OUT))
	$(GO) test -c -o bin/fsm.test ./fsm
	: > $(BENCH_OUT)
	for pol in $(POLICIES); do for n in $(SIZES); do \
	  bin/fsm.test -test.run '^$$' -test.bench "^BenchmarkAllocRelease/policy=$$pol\$$/devices=$$n\$$" -test.benchtime 1s -test.count 5 -test.cpu 1 >> $(BENCH_OUT); \
	  bin/fsm.test -test.run '^$$' -test.bench "^BenchmarkMultiDevice/policy=$$pol\$$/devices=$$n\$$/" -test.benchtime 1s -test.count 5 -test.cpu 1 >> $(BENCH_OUT); \
	done; done
	for n in $(SIZES); do \
	  bin/fsm.test -test.run '^$$' -test.bench "^BenchmarkFragmentationAware/devices=$$n\$$/" -test.benchtime 1s -test.count 5 -test.cpu 1 >> $(BENCH_OUT); \
	done

# The write path beside etcd's, both as three real server processes on
# this machine, taking turns: 3 rounds of 30 s at 64 and 256 clients, plus
# dmsc with TLS and with multi-GPU requests; one table of medians and
# ratios. etcd comes from $(PEERS) (its build.sh builds it the first time,
# a few minutes). BENCH_VS_ETCD_FLAGS passes more flags (-profile DIR,
# -raw FILE, -rounds N, -duration D).
PEERS ?= ../shared/peers
PEERS_BIN ?= $${TMPDIR:-/tmp}/peers/bin
bench-vs-etcd: build
	test -x $(PEERS_BIN)/etcd -a -x $(PEERS_BIN)/etcdload || $(PEERS)/build.sh
	$(GO) run ./cmd/bench-vs-etcd -peers $(PEERS) -dmsc bin/dmsc $(BENCH_VS_ETCD_FLAGS)

# Container image: a static binary on scratch (deploy/Dockerfile), staged
# the way release tools do it: the build context holds only the binary and
# two empty directories (the data directory and /tmp, owned by the image's
# user). VERSION=1.2.3 stamps the binary. integration/container_test.go
# builds the image the same way.
IMAGE ?= dmsc:dev
IMAGE_CONTEXT = bin/image
image:
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)/data $(IMAGE_CONTEXT)/tmp
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath \
		-ldflags '-s -w$(if $(VERSION), -X main.version=$(VERSION))' \
		-o $(IMAGE_CONTEXT)/dmsc ./cmd/dmsc
	docker build -f deploy/Dockerfile -t $(IMAGE) $(IMAGE_CONTEXT)

# Three servers and two device hosts on this Docker engine
# (deploy/docker-compose.yml), with mutual TLS, HTTPS, ACLs and encrypted gossip;
# server-1's API on https://127.0.0.1:4646.
# compose-secrets makes, once, what the cluster needs that must not be in
# the image or the repository: the CA, a certificate per node, the
# operator's client certificate, the gossip key and each host's ACL token
# secret, in $(COMPOSE_SECRETS)
# (deploy/compose/secrets.sh, run with the image's own dmsc; files that
# exist are kept). compose-up makes them when missing.
# compose-down keeps the servers' volumes; COMPOSE_DOWN_FLAGS=-v drops them.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_PROJECT ?= dmsc
COMPOSE_SECRETS ?= $(CURDIR)/deploy/compose/secrets
COMPOSE_ENV = DMSC_IMAGE=$(IMAGE) DMSC_SECRETS_DIR=$(COMPOSE_SECRETS)
compose-secrets: image
	DMSC_IMAGE=$(IMAGE) deploy/compose/secrets.sh $(COMPOSE_SECRETS)

compose-up: image compose-secrets
	$(COMPOSE_ENV) $(COMPOSE) -f deploy/docker-compose.yml -p $(COMPOSE_PROJECT) up -d

compose-down:
	$(COMPOSE_ENV) $(COMPOSE) -f deploy/docker-compose.yml -p $(COMPOSE_PROJECT) down $(COMPOSE_DOWN_FLAGS)
