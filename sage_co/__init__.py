"""sage-co: SageAttention-style INT8/FP8 attention for AMD RDNA4 (gfx1201) as precompiled code objects.

    import sage_co
    out = sage_co.sage_attention(q, k, v)          # bf16 [B, S, H, 128] in and out

On a gfx1201 GPU the shipped code objects run through hip-python; on CPU tensors they run, bit for bit
the same machine code, in the built-in emulator (sage_co.emu).
"""
__version__ = "0.1.0"

from .api import sage_attention, sage_attention_fwd, sage_prepare  # noqa: E402
from .prepared import SagePrepared  # noqa: E402
from .compat import sageattn, sageattn_varlen  # noqa: E402  (SageAttention's API, sage_co/compat.py)

__all__ = ["sage_attention", "sage_attention_fwd", "sage_prepare", "SagePrepared", "sageattn", "sageattn_varlen",
           "__version__"]

import os as _os  # noqa: E402

if _os.environ.get("SAGE_CO_SAGEATTENTION_SHIM"):  # opt-in: sage_co/integrations/sageattention_shim.py
    from .integrations import sageattention_shim as _shim
    _shim.install_from_env()
