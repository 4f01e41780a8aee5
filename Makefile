# vigil's Makefile is a menu: CI calls `make test` unchanged (.ci/run).
#   make run     install what is missing, build, run the analytics demo: configs/demo-people.yaml
#                (YOLOX-Nano, when setup could install it) or configs/demo-faces.yaml (BlazeFace)
#   make test    install what is missing, vet, lint the tests, run every test with -race
#   make setup   only install (Debian packages, Go if needed, ONNX Runtime, models, media)
#   make build   only build bin/vigil
#   make bench   build, then `vigil bench` (decode, inference, pipeline; one run)
#   make camera  an RTSP test camera at rtsp://127.0.0.1:8554/stream (README.md)
#   make generate  the config reference (docs/config.md, configs/example.yaml) from internal/config
#   make screenshots  the README's console screenshots (docs/img/console-*.png), taken by the
#                console's browser test (internal/console) in headless chromium
#   make static  bin/vigil-static + bin/ffmpeg-static against a minimal static FFmpeg
#                (built once into ~/.cache/vigil; ldd shows only libc, libm, libz, libbz2)
#   make gpu-bundle  make static, then .gpu/: vigil-static, ffmpeg-static, ONNX Runtime
#                with its CUDA provider, models; `. .gpu/unpack.sh` on a GPU machine
#   make image   make build, then bin/image/vigil-cpu.oci.tar and vigil-gpu.oci.tar:
#                OCI image archives assembled from Debian packages with umoci, no
#                container daemon (deploy/README.md)
SHELL := /bin/bash
GO = $(shell bash scripts/go.sh)
BIN := bin/vigil
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
# go-nvml's bundled nvml.h marks vGPU calls deprecated; silence gcc about it.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: setup build run test bench camera check-config generate clean static gpu-bundle image screenshots

setup:
	@bash scripts/setup.sh

build: setup
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/vigil

# The demo tracks people crossing a line and standing in a zone when
# YOLOX-Nano is in the models directory (where vigil looks: as
# internal/assets, $VIGIL_CACHE_DIR, else $XDG_CACHE_HOME/vigil, else
# ~/.cache/vigil), else faces in a zone. configs/demo.yaml is the same
# service without analytics.
run: build
	@models="$${VIGIL_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/vigil}/models"; \
	if [ -f "$$models/yolox_nano.onnx" ]; then cfg=configs/demo-people.yaml; \
	else cfg=configs/demo-faces.yaml; \
	  echo "make run: no yolox_nano.onnx in $$models (make setup downloads it when github.com answers): tracking faces, not people"; fi; \
	echo "make run: $(BIN) run --config $$cfg; watch it with: $(BIN) tail --analytics"; \
	exec ./$(BIN) run --config $$cfg

# -p 1 keeps package test binaries from competing for the 2 CPUs of CI
# machines; -race everywhere, as required.
test: setup
	$(GO) vet ./...
	GO=$(GO) bash scripts/lint-tests.sh
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...

bench: build
	./$(BIN) bench

# The test camera of vigil's own tests (internal/rtsptest/server.py), by
# hand, until Ctrl-C: a live picture by default; CAMERA takes server.py's
# options instead, e.g. make camera CAMERA="--file clip.ts --loop". Debian's
# python3 has python3-gi (a pyenv or venv one would not): $VIGIL_PYTHON
# overrides it, as for the tests.
CAMERA ?= --preset live
camera: setup
	@$${VIGIL_PYTHON:-/usr/bin/python3} internal/rtsptest/server.py $(CAMERA)

check-config: build
	@for f in configs/*.yaml; do ./$(BIN) check-config $$f || exit 1; done

# Regenerates the config reference (docs/config.md's key table and
# configs/example.yaml) from the config structs; `make test` fails when it
# is out of date.
generate:
	$(GO) generate ./internal/config

# The console's browser test drives Debian's chromium (make setup installs
# it) against an in-process vigil and, with -readme, copies its screenshots
# over the README's.
screenshots: setup
	$(GO) test -count=1 -run TestConsoleInBrowser ./internal/console/ -args -readme

# Not used by `make test`/CI. The FFmpeg build is cached under ~/.cache/vigil,
# keyed by its version and configure flags.
static: setup
	@bash scripts/static-ffmpeg.sh $(VERSION)

# .gpu/ (git-ignored) must stay under 60 MiB: the script fails if it is not.
gpu-bundle: static
	@bash scripts/gpu-bundle.sh

# IMAGE=cpu or gpu builds one of the two. The GPU image's ONNX Runtime
# libraries are fetched once into ~/.cache/vigil as make gpu-bundle does.
IMAGE ?= all
image: build
	@bash scripts/image.sh $(IMAGE)

# Removes build outputs only; the cached static FFmpeg and ONNX Runtime GPU
# libraries stay in ~/.cache/vigil.
clean:
	rm -rf bin .gpu
