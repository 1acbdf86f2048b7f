"""What sage-co tells torch.compile about its own functions, without importing torch._dynamo (about 4 s of CPU)
into every process that imports sage-co and never compiles (the CLI, the selftest's children, distributed
workers)."""
from __future__ import annotations

# torch._dynamo.assume_constant_result marks the function with this attribute and returns it (torch >= 2.4 alike);
# tests/api/test_compile_dynamic_shapes.py checks that torch's decorator sets exactly what constant_result sets
MARK = "_dynamo_marked_constant"


def constant_result(fn):
    """torch.compiler.assume_constant_result(fn), minus the import: dynamo runs fn once at trace time and treats its
    result as a constant (for functions that read files or host state dynamo cannot trace)."""
    setattr(fn, MARK, True)
    return fn
