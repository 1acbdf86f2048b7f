"""Shared fixtures of the emulator tests."""
from pathlib import Path

import numpy as np
import pytest

from sage_co.emu import Device

CLANG_CORPUS = Path(__file__).parent / "corpus" / "clang"


@pytest.fixture()
def clang_corpus():
    """Factory: clang_corpus("calls.co") -> (dev, mod, put, get) for a checked-in clang corpus code object on a fresh
    Device; put(array) -> device address of a copy, get(address, dtype, count) -> array."""
    def make(name: str):
        dev = Device()
        mod = dev.load((CLANG_CORPUS / name).read_bytes(), name)

        def put(a):
            p = dev.alloc(a.nbytes)
            dev.write(p, np.ascontiguousarray(a))
            return p

        def get(p, dt, n):
            return np.frombuffer(dev.read(p, np.dtype(dt).itemsize * n), dt).copy()
        return dev, mod, put, get
    return make
