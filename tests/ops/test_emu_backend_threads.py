"""Concurrent calls on the emulator backend (issue 11 item 1).

The emulator keeps device memory in one numpy arena that is replaced by a larger copy when an allocation does not
fit. Before the backend lock, a thread whose call grew the arena while another thread's kernel ran left that kernel
writing into the old arena: wrong or NaN output and no error. Here every call starts on a tiny arena, so the
threads' allocations force growth while the other threads' kernels run; each thread's result must equal its
single-threaded result bit for bit.
"""
from __future__ import annotations

import threading

import pytest
import torch

from sage_co import api, launch
from sage_co.backends.emu import EmuBackend

TINY_ARENA = 4096  # bytes: every call of the test grows it


def _fresh_tiny_backend(install_backend) -> EmuBackend:
    backend = EmuBackend()
    backend.device.__init__(TINY_ARENA)
    return install_backend("emu", backend)


def _inputs(seed: int, S: int):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, S, 2, 128, generator=g).to(torch.bfloat16) for _ in range(3))


def test_threads_growing_the_arena_get_their_single_threaded_results(install_backend):
    cases = [(seed, S) for seed, S in ((1, 64), (2, 96), (3, 160))]
    inputs = [_inputs(seed, S) for seed, S in cases]
    expected = [api.sage_attention(*qkv, backend="emu") for qkv in inputs]   # one at a time

    backend = _fresh_tiny_backend(install_backend)
    results: dict[int, torch.Tensor] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(inputs))

    def worker(i: int) -> None:
        try:
            start.wait()
            results[i] = api.sage_attention(*inputs[i], backend="emu")
        except BaseException as exc:  # reported below; a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(backend.device.mem) > TINY_ARENA, "the test must make the arena grow"
    for i, (seed, S) in enumerate(cases):
        assert torch.equal(results[i], expected[i]), f"thread {i} (seed {seed}, S={S}) got another result"


def test_first_launches_from_several_threads_share_one_backend(install_backend):
    install_backend("emu", None)   # no emu backend yet: the threads' first get_backend creates it
    got: list[object] = []
    start = threading.Barrier(4)

    def worker() -> None:
        start.wait()
        got.append(launch.get_backend("emu"))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(b) for b in got}) == 1


def test_lock_is_released_after_a_failing_launch(install_backend, monkeypatch):
    """A launch that raises inside the backend, with the lock held, must not leave it held: another thread must get
    it (an RLock is re-entrant, so only another thread can tell) and the next call must run."""
    backend = _fresh_tiny_backend(install_backend)
    q, k, v = _inputs(5, 64)
    expected = api.sage_attention(q, k, v, backend="emu")
    real_module = backend.module
    held_when_failing = []

    class FailingModule:
        def launch(self, *args, **kwargs):
            held_when_failing.append(backend.lock._is_owned())
            raise RuntimeError("kernel fault (injected)")

    monkeypatch.setattr(backend, "module", lambda shipped: FailingModule())
    with pytest.raises(RuntimeError, match="injected"):
        api.sage_attention(q, k, v, backend="emu")
    assert held_when_failing == [True], "the failure must happen inside run(), with the lock held"
    got = []
    t = threading.Thread(target=lambda: got.append(backend.lock.acquire(timeout=2) and backend.lock.release() is None))
    t.start()
    t.join()
    assert got == [True], "another thread could not take the lock after the failing launch"
    monkeypatch.setattr(backend, "module", real_module)
    assert torch.equal(api.sage_attention(q, k, v, backend="emu"), expected)
