"""Issue 25, the correctness round: silent wrong results, late refusals and the package surface. Each test
reproduces one numbered item of the issue and fails on the code before its fix (the item is in the docstring)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import sage_co
from sage_co import reference


def _qkv(B=2, S_q=200, S_kv=260, H=2, D=64, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, S_q, H, D, generator=g).to(dtype), torch.randn(B, S_kv, H, D, generator=g).to(dtype),
            torch.randn(B, S_kv, H, D, generator=g).to(dtype))


# ------------------------------------------------------------------------------ item 1: block_mask on another device
@pytest.mark.parametrize("entry", ["sage_attention", "sage_attention_fwd", "reference"])
def test_block_mask_on_another_device_is_refused(entry):
    """Item 1: a meta block_mask with CPU q/k/v returned uninitialised memory (the op fell through to its fake)."""
    q, k, v = _qkv()
    bm = torch.ones(2, 2, 4, 5, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"block_mask: expected a tensor on cpu .* got meta"):
        if entry == "sage_attention":
            sage_co.sage_attention(q, k, v, block_mask=bm)
        elif entry == "sage_attention_fwd":
            sage_co.sage_attention_fwd(sage_co.sage_prepare(q, k, v, backend="emu"), block_mask=bm)
        else:
            reference.sage_attention(q, k, v, block_mask=bm)


# ------------------------------------------------------------------------------ item 14: package surface
def test_submodules_are_lazy_attributes():
    """Item 14: `import sage_co; sage_co.parallel` raised AttributeError (only listed names were served)."""
    code = ("import sys, sage_co\n"
            "assert 'torch' not in sys.modules\n"
            "for name in ('parallel', 'sparse', 'masks', 'integrations', 'reference', 'validate'):\n"
            "    m = getattr(sage_co, name)\n"
            "    assert m is sys.modules['sage_co.' + name], name\n"
            "assert sage_co.parallel.sequence_parallel_attention\n"
            "try:\n"
            "    sage_co.no_such_thing\n"
            "except AttributeError as e:\n"
            "    assert 'no_such_thing' in str(e)\n"
            "else:\n"
            "    raise SystemExit('no AttributeError')\n")
    subprocess.run([sys.executable, "-c", code], check=True)
