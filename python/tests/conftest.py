"""Fixtures: one store per session, opened from the launcher's environment
(single rank without a launcher; mpiexec.mpich -n 4 or ddrun -n 4 for real
ranks), or over mpi4py's MPI.COMM_WORLD under mpirun.openmpi -n 4."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import ddstore  # noqa: E402


def library_codes():
    """The library's code of each error kind, by name (dds_error_name)."""
    l = ddstore._lib.lib()
    return {l.dds_error_name(c).decode(): c for c in range(1, 128) if l.dds_error_name(c)}


def local_rows(rank, base=37):
    """Rows of rank's shard: uneven (base + 5·rank)."""
    return base + 5 * rank


def pattern(g, row_shape, dtype):
    """The rows of global indices g (array) of a variable: exact in every dtype."""
    g = np.asarray(g, dtype=np.int64).reshape((-1,) + (1,) * len(row_shape))
    j = np.arange(int(np.prod(row_shape)), dtype=np.int64).reshape(row_shape)[None]
    v = g * 1009 + j * 7
    dt = np.dtype(dtype)
    if dt == np.bool_:  # the top bit of a hash: no period, so a row read off by k is caught
        x = v.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        x ^= x >> np.uint64(29)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        return (x >> np.uint64(63)) == 1
    if dt == np.uint8:
        return (v % 251).astype(np.uint8)
    if dt.kind == "f":
        return (v % 100003).astype(dt) * dt.type(0.5)
    return v.astype(dt)


def add_pattern(store, name, row_shape, dtype, base=37):
    """Adds name with this rank's rows of the global pattern; returns global rows."""
    rank, width = store.rank % store.width, store.width
    first = sum(local_rows(r, base) for r in range(rank))
    n = local_rows(rank, base)
    store.add(name, pattern(np.arange(first, first + n), row_shape, dtype).reshape((n,) + tuple(row_shape)))
    return sum(local_rows(r, base) for r in range(width))


def world_comm():
    """MPI.COMM_WORLD from mpi4py under Open MPI's mpirun (Debian's mpi4py is
    built on Open MPI), else None: the store then bootstraps from the
    launcher's environment (MPICH's PMI, ddrun's tcp rendezvous)."""
    if "OMPI_COMM_WORLD_SIZE" not in os.environ:
        return None
    from mpi4py import MPI
    return MPI.COMM_WORLD


@pytest.fixture(scope="session")
def store():
    s = ddstore.DDStore(world_comm(), timeout=60)
    yield s
    if not s.closed:
        s.close()


@pytest.fixture
def single(store):
    """Skips tests that start jobs of their own outside the single-rank session."""
    if store.size > 1:
        pytest.skip("starts its own jobs: single-rank session only")


def clean_env():
    """This environment without the launcher's variables, for jobs the tests start."""
    return {k: v for k, v in os.environ.items()
            if not (k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDSTORE_JOB", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE") or k.startswith(("PMI_", "SLURM_", "OMPI_", "HYDRA_", "PMIX_")))}
