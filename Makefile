# Build, test and benchmark dmsc.

GO ?= go

.PHONY: build test bench image compose-up compose-down

build:
	$(GO) build -o bin/dmsc ./cmd/dmsc

test:
	$(GO) test -race ./...

# Scheduler throughput: allocate+release pairs per policy at 1k, 10k and
# 100k devices, multi-device requests, FragmentationAware, the command
# codec and snapshots. For the figures the targets are judged by, run
#   go test -run '^$' -bench AllocRelease -benchtime 2s -count 5 ./fsm/
# and take the medians.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1s ./fsm/

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
# (deploy/docker-compose.yml); server-1's API on 127.0.0.1:4646.
# compose-down keeps the servers' volumes; COMPOSE_DOWN_FLAGS=-v drops them.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_PROJECT ?= dmsc
compose-up: image
	DMSC_IMAGE=$(IMAGE) $(COMPOSE) -f deploy/docker-compose.yml -p $(COMPOSE_PROJECT) up -d

compose-down:
	DMSC_IMAGE=$(IMAGE) $(COMPOSE) -f deploy/docker-compose.yml -p $(COMPOSE_PROJECT) down $(COMPOSE_DOWN_FLAGS)
