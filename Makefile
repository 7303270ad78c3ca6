# The two set-up commands of the README:
#   make demo   install what is missing, build, run the demo job
#   make test   install what is missing, build, run the whole test suite
# Knobs: BUILD (build folder), JOBS (parallel build jobs), CMAKE_FLAGS (e.g. -DSQUALL_CUDA=OFF).
BUILD       ?= build
JOBS        ?= $(shell scripts/ncpus)
CMAKE_FLAGS ?=
NP          ?= 2

MAKEFLAGS += --no-print-directory

# Open MPI refuses to run as root unless told; CI and fresh machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT         := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all deps configure build demo test clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The demo: who runs where, then LeNet-5 trained on Debian's Fashion-MNIST by 2 ranks x 2
# learners with synchronous model averaging (Crossbow's SMA) through the hierarchical
# allreduce: 5 epochs, 15-35 s on two cores, ending with the test accuracy and throughput.
demo: build
	mpirun -np $(NP) --oversubscribe $(BUILD)/bin/squall info
	mpirun -np $(NP) --oversubscribe $(BUILD)/bin/squall train --config configs/fashion-mnist-sma.toml

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

clean:
	rm -rf $(BUILD)
