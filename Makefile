# Build, test and benchmark dmsc.

GO ?= go

.PHONY: build test bench

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
