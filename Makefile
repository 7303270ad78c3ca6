# The two set-up commands of the README:
#   make demo   install what is missing, build, run the demo job
#   make test   install what is missing, build, run the whole test suite
# Knobs: BUILD (build folder), JOBS (parallel build jobs), TEST_JOBS (tests at once),
# CMAKE_FLAGS (e.g. -DSQUALL_CUDA=OFF).
BUILD       ?= build
JOBS        ?= $(shell scripts/ncpus)
# One test more than cores: many tests spend part of their time waiting (MPI start-up, Slurm's
# requeue hold, rate-limited cluster links, pip), and the CPU-bound trainings run alone anyway
# (RUN_SERIAL).
TEST_JOBS   ?= $(shell echo $$(( $(JOBS) + 1 )))
CMAKE_FLAGS ?=
NP          ?= 2

MAKEFLAGS += --no-print-directory

# Open MPI refuses to run as root unless told; CI and fresh machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT         := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all deps configure build squall demo demo-climate test clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The program alone: what the demos run. The test binaries (and their ThreadSanitizer copies)
# are built by `make test`.
squall: configure
	@cmake --build $(BUILD) -j $(JOBS) --target squall

# The demo: who runs where, then LeNet-5 trained on Debian's Fashion-MNIST by 2 ranks x 2
# learners with synchronous model averaging (Crossbow's SMA) through the hierarchical
# allreduce: 5 epochs, 15-35 s on two cores, ending with the test accuracy and throughput.
# --overwrite: a second `make demo` replaces the first one's run dir (runs/fashion-mnist-sma).
demo: squall
	mpirun -np $(NP) --oversubscribe $(BUILD)/bin/squall info
	mpirun -np $(NP) --oversubscribe $(BUILD)/bin/squall train --config configs/fashion-mnist-sma.toml --overwrite

# The climate demo: synthetic CAM5-like fields at 96 x 144 (640 training samples, 64 held
# out, other seeds), labelled by squall's TECA-style heuristics, then a small U-Net trained
# to find tropical cyclones and atmospheric rivers (configs/climate-tiny.toml), ending with
# the held-out mean IoU and the IoU of each class; then the trained model writes masks for the
# held-out fields as the generator wrote them, before labelling (squall predict, CF netCDF).
CLIMATE ?= data/climate-tiny
demo-climate: squall
	$(BUILD)/bin/squall data climate --out $(CLIMATE)/raw-train --samples 640 --height 96 --width 144 --seed 11
	$(BUILD)/bin/squall data climate --out $(CLIMATE)/raw-test --samples 64 --height 96 --width 144 --seed 12
	$(BUILD)/bin/squall data label --in $(CLIMATE)/raw-train --out $(CLIMATE)/train
	$(BUILD)/bin/squall data label --in $(CLIMATE)/raw-test --out $(CLIMATE)/test
	$(BUILD)/bin/squall train --config configs/climate-tiny.toml --overwrite --set data.train=$(CLIMATE)/train --set data.test=$(CLIMATE)/test
	$(BUILD)/bin/squall predict --run runs/climate-tiny --data $(CLIMATE)/raw-test --out runs/climate-tiny/masks --png

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) --timeout 900

clean:
	rm -rf $(BUILD)
