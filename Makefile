# ddstore: build, test and demo targets. Every target installs what it needs first.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps build test test-race demo bench clean

# Debian packages the engine and the tests need: libfabric (headers + fi_info), MPICH's mpiexec, tmux.
deps:
	@missing=""; \
	pkg-config --exists libfabric 2>/dev/null || missing="$$missing libfabric-dev"; \
	command -v fi_info >/dev/null || missing="$$missing libfabric-bin"; \
	command -v mpiexec >/dev/null || missing="$$missing mpich"; \
	command -v tmux >/dev/null || missing="$$missing tmux"; \
	command -v gcc >/dev/null || missing="$$missing gcc"; \
	command -v pkg-config >/dev/null || missing="$$missing pkg-config"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@command -v $(GO) >/dev/null || { echo "Go 1.26 is required (https://go.dev/dl); put it on PATH" >&2; exit 1; }

build: deps
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/train ./examples/bench

# The README's test command.
test: deps
	$(GO) vet ./...
	DDSTORE_REQUIRE_FABRIC=1 $(GO) test -count=1 -timeout 20m ./...
	$(GO) test -race -count=1 -timeout 10m -run 'Concurrent|Race' ./engine ./telemetry

# The README's main job: a 4-rank trainer on the embedded default config, with ddtop attached.
demo: build
	bash examples/demo.sh

bench: build
	$(BIN)/ddrun -n 2 $(BIN)/bench

clean:
	rm -rf $(BIN)
