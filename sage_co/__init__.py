"""sage-co: SageAttention-style INT8/FP8 attention for AMD RDNA4 (gfx1201) as precompiled code objects.

    import sage_co
    out = sage_co.sage_attention(q, k, v)          # bf16 [B, S, H, 128] in and out

    with sage_co.sdpa.enabled():                   # F.scaled_dot_product_attention -> sage-co where served
        image = pipe(prompt).images[0]

On a gfx1201 GPU the shipped code objects run through hip-python; on CPU tensors they run, bit for bit
the same machine code, in the built-in emulator (sage_co.emu).

`import sage_co` itself imports nothing that needs torch: the public functions below load on first use, so the
kernel author's tools (build_asm.py, tools/disasm_check.py, sage_co.emu.disasm, sage_co.abi) run without torch.
"""
from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

# public name -> the submodule that defines it (imported on first attribute access, PEP 562)
_LAZY = {
    "sage_attention": "api",
    "sage_attention_fwd": "api",
    "sage_prepare": "api",
    "SagePrepared": "prepared",
    "sageattn": "compat",          # SageAttention's API (sage_co/compat.py)
    "sageattn_varlen": "compat",
    "sage_attention_varlen": "varlen",
    "BLOCK_Q": "masks",            # the kernels' query / key tiles: block_mask granularity
    "BLOCK_KV": "masks",
    "predict_block_mask": "sparse",
    "sliding_tile_mask": "sparse",
    "radial_mask": "sparse",
}

_SUBMODULES = ("sdpa",)   # public submodules reachable as attributes: sage_co.sdpa.enabled() after `import sage_co`

__all__ = [*_LAZY, *_SUBMODULES, "__version__"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)   # the import binds it in globals()
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a submodule (sage_co.parallel, .sparse, .masks, .integrations, ...): `import sage_co; sage_co.parallel`
        # works like `import sage_co.parallel`
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'sage_co' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


import os as _os  # noqa: E402

if _os.environ.get("SAGE_CO_SAGEATTENTION_SHIM"):  # opt-in (imports torch): sage_co/integrations/sageattention_shim.py
    from .integrations import sageattention_shim as _shim
    _shim.install_from_env()
