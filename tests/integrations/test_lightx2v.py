"""sage_co.integrations.lightx2v against LightX2V's attention-weight contract (LightX2V itself is not on PyPI and
pins torch<=2.11, so it cannot be installed next to torch 2.13 here: the contract and the plugin are tested)."""
from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
import torch

import sage_co
from sage_co import accuracy
from sage_co.integrations import lightx2v
from sage_co.integrations.lightx2v import KEY, SageCoAttnWeight

ROOT = Path(__file__).resolve().parents[2]


def _tokens(S=70, H=2):
    q, k, v = accuracy.make_inputs("randn", 1, S, H)
    return q[0], k[0], v[0]  # [tokens, H, 128]


def test_apply_returns_tokens_by_heads_times_dim():
    q, k, v = _tokens()
    w = SageCoAttnWeight()
    cu = torch.tensor([0, q.shape[0]], dtype=torch.int32)
    out = w.apply(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=q.shape[0], max_seqlen_kv=k.shape[0],
                  block_idx=3, scheduler=None, grid_sizes=None, sol_morton_preordered=False)
    assert out.shape == (q.shape[0], q.shape[1] * q.shape[2]) and out.dtype == q.dtype
    ref = sage_co.sageattn(q[None], k[None], v[None], tensor_layout="NHD")
    assert torch.equal(out, ref.reshape(q.shape[0], -1))
    out4 = w.apply(q[None], k[None], v[None])  # [B, S, H, D] input
    assert torch.equal(out4, out)


def test_apply_honours_softmax_scale_and_refuses_what_it_cannot_do():
    q, k, v = _tokens(S=40)
    w = SageCoAttnWeight()
    assert torch.equal(w.apply(q, k, v, softmax_scale=0.05),
                       sage_co.sageattn(q[None], k[None], v[None], tensor_layout="NHD", sm_scale=0.05).reshape(40, -1))
    # causal (issue 14) passes straight through to sageattn
    assert torch.equal(w.apply(q, k, v, causal=True),
                       sage_co.sageattn(q[None], k[None], v[None], tensor_layout="NHD", is_causal=True).reshape(40, -1))
    with pytest.raises(TypeError, match="mystery"):
        w.apply(q, k, v, mystery=1)
    packed = torch.tensor([0, 15, 40], dtype=torch.int32)  # two sequences: varlen
    # two packed sequences go to sageattn_varlen (issue 14)
    assert torch.equal(w.apply(q, k, v, cu_seqlens_q=packed, cu_seqlens_kv=packed, max_seqlen_q=25, max_seqlen_kv=25),
                       sage_co.sageattn_varlen(q, k, v, packed, packed, 25, 25).reshape(40, -1))
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        w.apply(q, k, v, cu_seqlens_q=torch.tensor([0, 39]))


def test_varlen_apply_with_attn_mask_none():
    """Issue 39 item 9: LightX2V's varlen path passes attn_mask=None; it means no mask (it raised TypeError)."""
    q, k, v = _tokens(S=40)
    packed = torch.tensor([0, 15, 40], dtype=torch.int32)
    out = SageCoAttnWeight().apply(q, k, v, cu_seqlens_q=packed, cu_seqlens_kv=packed, max_seqlen_q=25,
                                   max_seqlen_kv=25, attn_mask=None)
    assert torch.equal(out, sage_co.sageattn_varlen(q, k, v, packed, packed, 25, 25).reshape(40, -1))


def test_apply_with_lse_for_ring_attn():
    """LightX2V's RingAttn wants (out [tokens, H*D] or [tokens, H, D], lse [tokens, H]) from a 3-D block."""
    q, k, v = _tokens()
    out, lse = SageCoAttnWeight().apply_with_lse(q, k, v, softmax_scale=None)
    ref_out, ref_lse = sage_co.sageattn(q[None], k[None], v[None], tensor_layout="NHD", return_lse=True)
    assert out.shape == (q.shape[0], q.shape[1] * 128) and lse.shape == (q.shape[0], q.shape[1])
    assert lse.dtype == torch.float32 and lse.device == q.device
    assert torch.equal(out, ref_out.reshape(q.shape[0], -1))
    assert torch.equal(lse, ref_lse[0].transpose(0, 1))


def test_template_hooks_are_harmless():
    w = SageCoAttnWeight()
    w.set_config({"a": 1})
    assert w.config == {"a": 1} and w.state_dict() == {} and w.load_state_dict({}, 0) == {}
    w.load({}), w.to_cpu(), w.to_cuda(), w.load_state_dict_from_disk(0)


class _LightX2VStyleRegister(dict):
    """Stand-in with the semantics of LightX2V's Register (registry_factory.py): `reg(key)(cls)` registers and a
    duplicate key raises. Used because LightX2V cannot be installed here."""

    def __call__(self, key):
        def deco(target):
            if key in self:
                raise Exception(f"{key} already exists.")
            self[key] = target
            return target
        return deco


def test_register_adds_the_key_once_and_never_replaces():
    reg = _LightX2VStyleRegister(sage_attn2=object)
    lightx2v.register(reg)
    assert reg[KEY] is SageCoAttnWeight and reg["sage_attn2"] is object
    lightx2v.register(reg)  # idempotent
    other = _LightX2VStyleRegister({KEY: object})
    with pytest.raises(RuntimeError, match="already has"):
        lightx2v.register(other)


def test_entry_point_declared_for_lightx2v_platform_plugins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["lightx2v.platform_plugins"]["sage_co"]
    module, attr = target.split(":")
    assert getattr(importlib.import_module(module), attr) is lightx2v.register


def test_registration_in_real_lightx2v():
    pytest.importorskip("lightx2v_platform", reason="LightX2V is not installable here (not on PyPI; pins torch<=2.11)")
    from lightx2v_platform.registry_factory import PLATFORM_ATTN_WEIGHT_REGISTER
    lightx2v.register()
    assert PLATFORM_ATTN_WEIGHT_REGISTER[KEY] is SageCoAttnWeight
