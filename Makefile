# Two commands a newcomer needs: `make demo` and `make test`. Each sets up .venv itself.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-long test-slow test-walkthrough images test-images lint generate bench clean

$(STAMP): pyproject.toml constraints.txt setup.py geofed/codec/_huffman_c.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# constraints.txt pins torch to the CPU build this machine has on disk (a range would pull CUDA builds).
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/geofed local

# The default suite leaves out the end-to-end runs of 20 s or more (marked long: `make test-long`, which CI runs).
# Each suite ends with its slowest tests (--durations): where to look when CI's time grows.
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not containers and not long" --durations=15

test-long: $(STAMP)
	$(BIN)/python -m pytest -q -m "long and not slow and not containers" --durations=0

# docs/kubernetes.md's shell blocks run with bash (real kubectl, helm over helm-python-sdk, geofed) against two
# emulated clusters whose nodes (tests/k8s/node/) run every pod, the operator's included, as podman containers
# of the images `make images` builds (GEOFED_WALKTHROUGH_RUNTIME=process: as local processes, no images), and
# the node's container tests. Needs root. About 3 minutes, so CI runs it on its own after `make images`.
test-walkthrough: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow or containers" tests/k8s/test_walkthrough.py tests/k8s/test_kubelet_containers.py

# The three images (localhost/geofed/ps:dev, localhost/geofed/operator:dev, localhost/geofed/client:dev-cpu)
# with podman, from a Debian base made with debootstrap when no registry is reachable: images/build.sh.
images:
	images/build.sh

# The images (rebuilt first: a layer-cached rebuild takes seconds) run as the operator's pods with podman.
test-images: $(STAMP) images
	$(BIN)/python -m pytest -q -m containers tests/images

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check .

generate: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. geofed/protocol/geofed.proto
	$(BIN)/python -m geofed_operator.generate

clean:
	rm -rf $(VENV) runs .pytest_cache
