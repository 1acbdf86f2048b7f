import gc
import os

import pytest
import torch

# pytest-xdist runs one worker per core (-n auto), and torch (and OpenMP under it) would start one thread per core in
# each: cores^2 threads whose spin-waits thrash (the CPU reference model at S=2048 took 20 s instead of 1 s on a loaded
# 2-core machine). Each worker gets its share of the cores; OMP_NUM_THREADS carries it to the subprocesses tests start.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = max(1, (os.cpu_count() or 1) // _WORKERS)
    torch.set_num_threads(_THREADS)
    os.environ["OMP_NUM_THREADS"] = str(_THREADS)


# Python's collector, tuned for this suite: the emulator's runs build thousands of handler objects per new kernel shape
# and keep them (sage_co/emu/executor.py, KEPT_HANDLERS), and with the default thresholds (700, 10, 10) each is scanned
# in a young collection, again in gen1, and in a full collection every few runs (~1 s each once torch and the decoded
# kernels are live): 32 s of 170 s in tests/kernels/test_attention_vs_reference.py + test_varlen_packed.py. Rarer
# collections scan the same objects fewer times: 6 s there. Only this test process; the library leaves gc alone.
gc.set_threshold(20_000, 50, 20)


def _gfx1201_present() -> bool:
    if getattr(torch.version, "hip", None) is None or not torch.cuda.is_available():
        return False
    return any(torch.cuda.get_device_properties(i).gcnArchName.split(":")[0] == "gfx1201"
               for i in range(torch.cuda.device_count()))


GFX1201 = _gfx1201_present()


def pytest_collection_modifyitems(config, items):
    if GFX1201:
        return
    why = ("needs a real gfx1201 GPU visible to a ROCm build of torch; this machine has "
           + ("no ROCm torch" if getattr(torch.version, "hip", None) is None else "no gfx1201 device"))
    for item in items:
        if "gfx1201" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def install_backend():
    """install(name, instance): make `instance` the process's backend `name` for this test (sage_co.launch.use_backend;
    None removes it, so the next launch creates a fresh one); the previous ones come back afterwards."""
    from sage_co import launch
    installed = []

    def install(name, instance):
        installed.append((name, launch.use_backend(name, instance)))
        return instance
    yield install
    for name, previous in reversed(installed):
        launch.use_backend(name, previous)


@pytest.fixture
def no_kernels(monkeypatch):
    """Fail the test if any kernel launches: input validation must come first (the launch layer and each op
    module's imported `launch` are replaced)."""
    import sage_co.launch
    import sage_co.ops.attention
    import sage_co.ops.predict
    import sage_co.ops.prepare

    def boom(*a, **k):
        raise AssertionError("a kernel ran before the input was validated")
    for module in (sage_co.launch, sage_co.ops.attention, sage_co.ops.prepare, sage_co.ops.predict):
        monkeypatch.setattr(module, "launch", boom)


def pytest_unconfigure(config):
    """The process is about to exit: pytest's unraisable-exception cleanup then runs five full garbage collections,
    and each scans every object the session built (the emulator's decoded kernels and kept handler closures: ~2 s
    each per worker). Freezing them first leaves those collections only what the cleanup itself creates."""
    gc.freeze()
