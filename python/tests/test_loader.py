"""Loader: DistributedSampler semantics, user samplers, zero-copy leases,
DataLoader, fork safety; every value checked against its pattern."""
import gc
import os
import select
import signal
import time

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import ddstore
from conftest import add_pattern, library_codes, pattern

SHAPE = (4, 6)


@pytest.fixture(scope="module")
def img(store):
    n = add_pattern(store, "img", SHAPE, "float32")
    add_pattern(store, "lab", (), "int64")
    yield n
    store.free("img")
    store.free("lab")


def check_batch(b, shape=SHAPE):
    idx = b["index"].numpy()
    assert b["img"].shape == (len(idx),) + shape and b["img"].dtype == torch.float32
    assert b["lab"].shape == (len(idx),) and b["lab"].dtype == torch.int64
    np.testing.assert_array_equal(b["img"].numpy(), pattern(idx, SHAPE, np.float32).reshape((len(idx),) + shape))
    np.testing.assert_array_equal(b["lab"].numpy(), pattern(idx, (), np.int64))
    return idx


def ptr(b):
    return b["img"].data_ptr()


@pytest.mark.parametrize("workers,prefetch,shuffle,drop_last", [(0, 1, False, False), (1, 2, True, False),
                                                                 (2, 2, True, True), (3, 4, False, True)])
def test_distributed_sampler_semantics(store, img, workers, prefetch, shuffle, drop_last):
    n = img
    with ddstore.Loader(store, ["img", "lab"], batch_size=7, shuffle=shuffle, seed=3, drop_last=drop_last,
                        workers=workers, prefetch=prefetch) as ld:
        for epoch in (0, 1):
            ld.set_epoch(epoch)
            got = np.concatenate([check_batch(b) for b in ld])
            want_n = n // store.width if drop_last else -(-n // store.width)
            assert len(got) == (want_n // 7 * 7 if drop_last else want_n)
            assert len(ld) == (want_n // 7 if drop_last else -(-want_n // 7))
            if not shuffle:
                # torch's DistributedSampler(shuffle=False) order, exactly
                ds = tud.DistributedSampler(range(n), num_replicas=store.width, rank=store.rank % store.width,
                                            shuffle=False, drop_last=drop_last)
                assert list(got) == list(ds)[:len(got)]
            else:
                assert len(set(got)) == len(got)
                if epoch == 0:
                    first = got
                else:
                    assert list(first) != list(got)  # reshuffled per epoch


@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffled_shares_partition(store, img, drop_last):
    """The shuffled shares of all 3 replicas together cover every row: with
    drop_last, distinct rows, n // 3 a replica less its last partial batch;
    else each row at least once and 3 * ceil(n / 3) in all. A new epoch
    gives every replica a new share."""
    n, reps, bs = img, 3, 5
    shares = {}
    for epoch in (0, 1):
        for r in range(reps):
            with ddstore.Loader(store, ["img", "lab"], batch_size=bs, shuffle=True, seed=11, drop_last=drop_last,
                                num_replicas=reps, rank=r) as ld:
                ld.set_epoch(epoch)
                shares[epoch, r] = list(np.concatenate([check_batch(b) for b in ld]))
        every = [g for r in range(reps) for g in shares[epoch, r]]
        if drop_last:
            assert len(every) == n // reps // bs * bs * reps and len(set(every)) == len(every)
            assert set(every) <= set(range(n))
        else:
            assert len(every) == -(-n // reps) * reps
            assert set(every) == set(range(n))
    for r in range(reps):
        assert shares[0, r] != shares[1, r]


def test_user_sampler_exact_torch_order(store, img):
    n = img
    ds = tud.DistributedSampler(range(n), num_replicas=store.width, rank=store.rank % store.width, shuffle=True,
                                seed=7)
    with ddstore.Loader(store, ["img", "lab"], batch_size=8, sampler=ds, workers=2) as ld:
        for epoch in (0, 3):
            ld.set_epoch(epoch)
            got = np.concatenate([check_batch(b) for b in ld])
            ds.set_epoch(epoch)
            assert list(got) == list(ds)
            assert len(ld) == -(-len(ds) // 8)
    # a callable epoch -> indices, with duplicates
    with ddstore.Loader(store, ["img"], batch_size=3, sampler=lambda e: [n - 1, e, e, 0], workers=1) as ld:
        ld.set_epoch(2)
        bs = list(ld)
        assert [list(b["index"].numpy()) for b in bs] == [[n - 1, 2, 2], [0]]
        with pytest.raises(IndexError):
            ld.sampler = lambda e: [n]
            iter(ld)


def test_zero_copy_lease(store, img):
    with ddstore.Loader(store, ["img", "lab"], batch_size=5, workers=1, prefetch=2, shuffle=True) as ld:
        it = iter(ld)
        held = next(it)
        held_img = held["img"]  # a view: keeps the lease
        held_idx = held["index"].numpy().copy()
        hp = held_img.data_ptr()
        # views of the off-heap batch buffer, not copies
        assert held["img"].numpy().base is not None and not held["img"].numpy().flags.owndata
        del held
        seen = set()
        for b in it:
            assert ptr(b) != hp, "a batch reuses the buffer of a batch still viewed"
            seen.add(ptr(b))
            check_batch(b)
            del b
        assert len(seen) <= ld.pool_size
        # the held tensor still holds its own rows after the whole epoch
        np.testing.assert_array_equal(held_img.numpy(), pattern(held_idx, SHAPE, np.float32))
        # slices and derived views keep the lease too
        part = held_img[1:3]
        del held_img
        gc.collect()
        ld.set_epoch(1)
        for b in ld:
            assert ptr(b) not in range(hp, hp + 5 * 96)
            check_batch(b)
        np.testing.assert_array_equal(part.numpy(), pattern(held_idx[1:3], SHAPE, np.float32))
        # once nothing views it, the buffer is reused
        del part
        gc.collect()
        ld.set_epoch(2)
        ptrs = [ptr(b) for b in ld]
        assert hp in ptrs
        # explicit release() hands the buffer back at once
        it = iter(ld)
        b = next(it)
        p0 = ptr(b)
        b.release()
        b.release()  # twice: a no-op
        again = [ptr(x) for x in it]
        assert p0 in again
    # copy=True: owned tensors, the buffers recycle at once
    with ddstore.Loader(store, ["img", "lab"], batch_size=5, workers=1, copy=True) as ld:
        bs = list(ld)  # all held at once: owned memory, each its own
        assert len(bs) > ld.pool_size
        assert len({ptr(b) for b in bs}) == len(bs)
        for b in bs:
            check_batch(b)


def test_dataloader_iterable_dataset(store, img):
    with ddstore.Loader(store, ["img", "lab"], batch_size=16, workers=2, prefetch=2, seed=1) as ld:
        assert isinstance(ld, tud.IterableDataset)
        dl = tud.DataLoader(ld, batch_size=None, num_workers=0)
        a = [check_batch(b) for b in dl]
        b = [check_batch(x) for x in ld]
        assert [list(x) for x in a] == [list(x) for x in b]
        assert len(dl) == len(ld)


def child_output(pid, r, timeout):
    """What forked child pid writes to pipe r (closed here), and its wait
    status, within timeout seconds; past it the child is killed and the
    test fails instead of hanging."""
    deadline = time.monotonic() + timeout
    out, status = b"", None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                break
            chunk = os.read(r, 4096)
            if not chunk:
                break
            out += chunk
        while status is None and time.monotonic() < deadline:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            else:
                time.sleep(0.01)
    finally:
        os.close(r)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if status is None:
        pytest.fail("the forked child did not end within %d s; it wrote %r" % (timeout, out))
    return out, status


def test_fork_child_gets_clear_error(store, img):
    ld = ddstore.Loader(store, ["img"], batch_size=4, workers=1)
    invalid = library_codes()["INVALID"]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: touch the store and the loader, report, exit without cleanup
        os.close(r)
        msgs = []
        for fn in (lambda: store.get_batch("img", [0]), lambda: next(iter(ld)), store.barrier, store.close):
            try:
                fn()
                msgs.append("no error")
            except ddstore.ForkError as e:
                ok = "forked child" in str(e) and isinstance(e, RuntimeError) and e.code == invalid
                msgs.append("ok" if ok else "%s (code %d)" % (e, e.code))
            except BaseException as e:  # noqa: B902
                msgs.append(repr(e))
        os.write(w, "|".join(msgs).encode())
        os._exit(0)
    os.close(w)
    out, status = child_output(pid, r, 60)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert out.decode() == "ok|ok|ok|ok"
    # the parent is unaffected
    np.testing.assert_array_equal(store.get_batch("img", [0]), pattern([0], SHAPE, np.float32))
    check_batch_img = list(ld)
    assert len(check_batch_img) == len(ld)
    # a DataLoader with forked workers reports the child's error
    dl = tud.DataLoader(ld, batch_size=None, num_workers=1)
    with pytest.raises(Exception) as e:
        list(dl)
    assert "forked child" in str(e.value)
    assert len(list(ld)) == len(ld)
    ld.close()
    ld.close()  # twice: a no-op
    with pytest.raises(ddstore.ClosedError):
        iter(ld)
