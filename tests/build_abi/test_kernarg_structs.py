"""Explicit kernarg structs: packing, and the load-time comparison with code-object metadata."""
import struct

import pytest

from sage_co.kernargs import Field, KernargMismatch, KernargStruct

META = {".kernarg_segment_size": 24, ".args": [
    {".name": "x.coerce", ".offset": 0, ".size": 8, ".value_kind": "global_buffer"},
    {".name": "n", ".offset": 8, ".size": 4, ".value_kind": "by_value"},
    {".name": "scale", ".offset": 12, ".size": 4, ".value_kind": "by_value"},
    {".name": "y.coerce", ".offset": 16, ".size": 8, ".value_kind": "global_buffer"}]}


def make(fields, size=24, name="test_kernel"):
    return KernargStruct(name, fields, size)


GOOD = [Field("x", "ptr", 0), Field("n", "u32", 8), Field("scale", "f32", 12), Field("y", "ptr", 16)]


def test_pack_layout():
    s = make(GOOD)
    s.check(META)
    raw = s.pack({"x": 0x1234_5678_9ABC, "n": 7, "scale": 0.5, "y": 16})
    assert struct.unpack("<QIfQ", raw) == (0x1234_5678_9ABC, 7, 0.5, 16)


def test_pack_rejects_bad_values():
    s = make(GOOD)
    with pytest.raises(ValueError, match=r"missing \['y'\]"):
        s.pack({"x": 0, "n": 1, "scale": 1.0})
    with pytest.raises(ValueError, match="test_kernel.n: -1 does not fit u32"):
        s.pack({"x": 0, "n": -1, "scale": 1.0, "y": 0})
    with pytest.raises(TypeError, match="test_kernel.n: expected an int"):
        s.pack({"x": 0, "n": 1.5, "scale": 1.0, "y": 0})


def test_declaration_errors():
    with pytest.raises(ValueError, match="overlaps"):
        make([Field("x", "ptr", 0), Field("n", "u32", 4)], 8)
    with pytest.raises(ValueError, match="not 8-byte aligned"):
        Field("x", "ptr", 4)
    with pytest.raises(ValueError, match="fields end at byte 24 but size says 32"):
        make(GOOD, 32)


def test_mismatch_shows_both_layouts():
    edited = [Field("x", "ptr", 0), Field("scale", "f32", 8), Field("n", "u32", 12), Field("y", "ptr", 16)]
    with pytest.raises(KernargMismatch) as exc:
        make(edited).check(META, where="k.co")
    msg = str(exc.value)
    assert "refusing to launch" in msg and "declared in Python" in msg and "code object metadata" in msg
    assert "field 'scale' (offset 8, size 4, by_value) vs code object 'n'" in msg
    shorter = [Field("x", "ptr", 0), Field("n", "u32", 8), Field("scale", "f32", 12)]
    with pytest.raises(KernargMismatch, match="3 declared fields, code object has 4"):
        make(shorter, 16).check(META)
