#!/usr/bin/env python3
"""The dead-code check of .ci/run: functions, methods, classes, properties and imports nothing uses, and unreachable
code, found by vulture over the whole repository (sources, tools, tests, benchmarks: a helper used only by a test is
used).

    python tools/dead_code.py      # exit 1 and list them, 0 when there are none

Variables and attributes are not reported (dataclass fields, kernarg names and table columns read by name would
drown the findings). A name used in a way vulture cannot see (a protocol method the runtime calls, a pytest hook or
fixture, a decorator-registered implementation) is ALLOWED below with the reason, or its decorator is in
IGNORE_DECORATORS.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("sage_co", "tools", "asm_src", "tests", "benchmarks", "build_asm.py", "build_hooks.py")
TYPES = ("function", "method", "class", "property", "import", "unreachable_code")
MIN_CONFIDENCE = 60
IGNORE_DECORATORS = ["@pytest.fixture", "@*.register_fake", "@*.register_kernel", "@*.register_autograd"]
# (path relative to the repository root, name) -> why it is used
ALLOWED = {
    ("build_hooks.py", "BuildPy"): "setuptools cmdclass, named in pyproject.toml",
    ("sage_co/__init__.py", "__getattr__"): "PEP 562 module attribute hook",
    ("sage_co/__init__.py", "__dir__"): "PEP 562 module dir() hook",
    ("sage_co/backends/base.py", "Backend"): "typing.Protocol of the backends (documentation of the interface)",
    ("sage_co/cli.py", "on_broken_pipe"): "rich.console.Console hook",
    ("sage_co/integrations/sageattention_shim.py", "create_module"): "importlib loader protocol",
    ("sage_co/integrations/sageattention_shim.py", "locate_file"): "importlib.metadata.Distribution protocol",
    ("sage_co/integrations/sageattention_shim.py", "find_distributions"): "importlib.metadata finder protocol",
    ("tests/conftest.py", "pytest_collection_modifyitems"): "pytest hook",
    ("tests/conftest.py", "pytest_unconfigure"): "pytest hook",
    ("tests/emu/corpus/flydsl/kernels.py", "wmma_gemm"): "called by name from the corpus build script",
    ("tests/emu/corpus/flydsl/kernels.py", "online_softmax_attention"): "called by name from the corpus build script",
    ("tests/emu/corpus/flydsl/kernels.py", "wmma_attention"): "called by name from the corpus build script",
}


def findings() -> list[str]:
    import vulture
    v = vulture.Vulture(ignore_decorators=IGNORE_DECORATORS)
    v.scavenge([str(ROOT / p) for p in PATHS])
    out = []
    for item in v.get_unused_code(min_confidence=MIN_CONFIDENCE, sort_by_size=False):
        rel = Path(item.filename).resolve().relative_to(ROOT).as_posix()
        if item.typ in TYPES and (rel, item.name) not in ALLOWED:
            out.append(f"{rel}:{item.first_lineno}: unused {item.typ} {item.name!r} ({item.confidence}% confidence)")
    return sorted(out)


def main() -> int:
    found = findings()
    for line in found:
        print(line)
    if found:
        print(f"tools/dead_code.py: {len(found)} unused definitions: delete them, or add the name to ALLOWED with "
              "the reason vulture cannot see its use", file=sys.stderr)
        return 1
    print("tools/dead_code.py: no unused functions, classes or imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
