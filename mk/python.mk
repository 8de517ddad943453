# python/: the C ABI (libddstore.so, go build -buildmode=c-shared) and the
# ddstore Python package over it (ctypes). Tests run with Debian's
# /usr/bin/python3 and python3-numpy, python3-torch, python3-pytest,
# python3-mpi4py, which python-deps installs with apt when /usr/bin/python3
# cannot import them.

.PHONY: python-lib python-ctest python-deps python-test

PYLIB := $(BIN)/libddstore.so

python-lib: deps
	$(GO) build -buildmode=c-shared -o $(PYLIB) ./python/libddstore

# The C ABI from C: one rank, every function, every value checked.
python-ctest: python-lib
	gcc -O1 -Wall -Wextra -Werror -o $(BIN)/ctest -Ipython/libddstore python/libddstore/ctest/ctest.c \
	  -L$(BIN) -lddstore -Wl,-rpath,'$$ORIGIN'
	cd /tmp && env -u RANK -u WORLD_SIZE -u PMI_FD -u PMI_RANK -u PMI_SIZE $(CURDIR)/$(BIN)/ctest

python-deps:
	@/usr/bin/python3 -c 'import numpy, torch, pytest, mpi4py' 2>/dev/null || { \
	  echo "installing: python3-numpy python3-torch python3-pytest python3-mpi4py"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    python3-numpy python3-torch python3-pytest python3-mpi4py; }

# The package's tests: single rank, then 4 real ranks under MPICH's mpiexec
# (PMI bootstrap), under ddrun (TCP rendezvous) and under Open MPI's mpirun
# with mpi4py's real MPI.COMM_WORLD (Debian's python3-mpi4py is built on
# Open MPI). Launchers by their full names: with both MPIs installed a bare
# mpiexec is whichever the alternatives chose. pytest exits non-zero when it
# collects nothing, so an empty run fails too.
PYTEST := /usr/bin/python3 -m pytest -q -p no:cacheprovider $(CURDIR)/python/tests
# Open MPI on one node: shared memory between the ranks (no tcp probing of
# every interface), more ranks than cores, and root allowed (CI runs as root).
OMPIRUN := env OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
	mpirun.openmpi --oversubscribe $(if $(SUDO),,--allow-run-as-root)

python-test: python-deps python-lib
	$(GO) build -o $(BIN)/ ./cmd/ddrun
	cd /tmp && timeout 900 $(PYTEST)
	cd /tmp && timeout 900 mpiexec.mpich -n 4 $(PYTEST)
	cd /tmp && timeout 900 $(CURDIR)/$(BIN)/ddrun -n 4 $(PYTEST)
	cd /tmp && timeout 900 $(OMPIRUN) -n 4 $(PYTEST)

TEST_EXTRA += python-ctest python-test
