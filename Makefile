# pylayer: `make demo` runs the main job end to end, `make test` runs every test.
# Both install what they need on a fresh Debian machine (you are expected to be root there).

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
TOOLS ?= $(HOME)/.cache/pylayer/tools
export PATH := $(BIN):$(PATH)
export PYLAYER_TOOLS := $(TOOLS)

# Debian packages the tests and the demo use: the C compiler and libdeflate pylayer-full links
# (scripts/build.sh), real wheels, the pip oracle, apt-get download, PostgreSQL's server
# binaries (the broker's store tests start their own server, no service).
DEB_PKGS := gcc libc6-dev libdeflate-dev python3 python3-pip python3-pip-whl python3-setuptools-whl python3-wheel-whl ca-certificates bc \
            python3.11-venv docker-registry bubblewrap chromium chromium-driver postgresql \
            patchelf fonts-dejavu-core fontconfig libblas3 liblapack3 libgfortran5 libimagequant0 libraqm0 \
            libwebp7 libwebpdemux2 libwebpmux3 libtiff6 libjpeg62-turbo libopenjp2-7 liblcms2-2 libfreetype6 \
            libxcb1 libqhull-r8.0 libssl3 libffi8 libxml2 libxslt1.1 zlib1g

.PHONY: all build deps tools test unit lint fuzz demo bench clean

all: build

# Two binaries from one main, both static (scripts/build.sh says how and why): bin/pylayer,
# the front end (-tags lean: run, exec and shell, which sessions call on every step, pure Go),
# and bin/pylayer-full, every command, to which the front end hands every other command line
# (cgo, for libdeflate's inflater in pulls). Install them side by side.
build:
	GO=$(GO) bash scripts/build.sh $(BIN)

# deps installs what is missing, and nothing when all is there: Debian's packages, the .deb
# files the fixtures repack (into $(DEBS)) and axe-core (into $(TOOLS)/axe-core) for the web
# page's accessibility check. It is the only step that installs or downloads anything: no
# test ever does.
DEBS ?= $(HOME)/.cache/pylayer/debs
export PYLAYER_DEBS := $(DEBS)
AXE  := $(TOOLS)/axe-core/node_modules/axe-core/axe.min.js
deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@python3 -m pip --version >/dev/null 2>&1 || { echo "python3 -m pip is missing (install python3-pip)"; exit 1; }
	@$(GO) run ./test/cmd/fetchdebs -cache $(DEBS) >/dev/null
	@[ -s $(AXE) ] || { command -v npm >/dev/null || { echo "npm is missing: install Node.js (apt-get install nodejs npm)"; exit 1; }; \
	  echo "installing axe-core into $(TOOLS)/axe-core"; \
	  npm install --silent --no-audit --no-fund --prefix $(TOOLS)/axe-core axe-core@4 >/dev/null; }

# The stock peer tools the tests check our artifacts with (cosign v2.6.5, crane), built once
# into $(TOOLS) and reused: a fresh cosign build takes minutes, a cached one nothing.
tools:
	PYLAYER_TOOLS=$(TOOLS) bash scripts/tools.sh all

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags libdeflate ./...
	$(GO) vet ./internal/gunzip
	$(GO) vet -tags lean ./cmd/pylayer ./internal/cli

# Every test: unit tests, fuzz seed corpora, and the end-to-end suites against real pip,
# real Debian wheels and real servers on 127.0.0.1, all under the race detector, with the
# build tags of the shipped binaries (libdeflate); the e2e suites run bin/ as make build made it.
test: deps tools lint build
	PYLAYER_E2E_BIN=$(BIN)/pylayer $(GO) test -race -tags libdeflate -count=1 -timeout 30m ./...

# The fast tier: no end-to-end suite, nothing installed, no root; every test that needs
# what `make deps` installs is skipped by -short (internal/testenv.Integration). Pure Go: no
# libdeflate (layer blobs are inflated by the streaming reader, as without the tag).
unit:
	$(GO) test -race -short -count=1 ./...

# A short coverage-guided run of every fuzz target (FUZZTIME each). Minimizing is capped so a
# new input does not eat the budget; below ~5s Go's fuzzer may stop with "context deadline
# exceeded" while a worker is busy, which is not a finding.
FUZZTIME ?= 20s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -tags libdeflate -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -tags libdeflate -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x $$pkg; \
	  done; done

demo: deps build
	bash scripts/demo.sh

bench: deps build
	bash bench/layers.sh
	bash bench/pull.sh
	bash bench/run.sh
	bash bench/broker.sh

clean:
	rm -rf $(BIN)
