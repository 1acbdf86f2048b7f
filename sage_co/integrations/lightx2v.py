"""LightX2V: sage-co as an attention-weight class under the key "sage_co" (config: `"attn_type": "sage_co"`, or
`"self_attn_1_type"` / `"cross_attn_1_type"` ... for single layers).

Registration: sage-co's pyproject declares the entry point
    [project.entry-points."lightx2v.platform_plugins"]  sage_co = "sage_co.integrations.lightx2v:register"
LightX2V (lightx2v_platform.set_ai_device) calls every plugin of that group before it merges the platform
registries into `ATTN_WEIGHT_REGISTER`; `register` adds `SageCoAttnWeight` to `PLATFORM_ATTN_WEIGHT_REGISTER`.
LightX2V's registries reject duplicate keys, so sage-co takes a new key and leaves "sage_attn2" alone.

The class follows LightX2V's attention-weight contract (AttnWeightTemplate and its sage_attn2 / flash_attn2):
  apply(q, k, v, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None, **kwargs)
      q [tokens, H, D] (one sequence) or [B, S, H, D]; returns [B * S_q, H * D] in q's dtype.
  apply_with_lse(q, k, v, softmax_scale=None)  -> (out [tokens, H * D], lse fp32 [tokens, H]) for RingAttn.
Keywords: `softmax_scale`, `causal`, `attn_mask`, `dropout_p`, ... follow sage_co.sageattn's policy (honoured,
documented no-op, or an error naming them). LightX2V also passes scheduling context that does not change the
attention (`CONTEXT_KWARGS`: block_idx, scheduler, grid_sizes, sol_morton_preordered, model_cls); those are
accepted and unused. [tokens, H, D] input with cu_seqlens runs sage_co.sageattn_varlen (one prepare + one attention
launch whatever the number of sequences, no host read of cu_seqlens: docs/numerics.md §Varlen; packed == the
per-sequence calls bit for bit); a missing cu_seqlens of one side is that side's one sequence [0, tokens], a
missing max_seqlen the side's token count (a bound that only widens the grid). It does not import LightX2V, so it
is usable (and tested) without it.
"""
from __future__ import annotations

import torch

from ..hostsafe import sageattn, sageattn_varlen   # compat's; a GPU error falls back (hostsafe)

KEY = "sage_co"
CONTEXT_KWARGS = frozenset({"block_idx", "scheduler", "grid_sizes", "sol_morton_preordered", "model_cls"})


def _cu_or_whole(cu, t):
    """cu_seqlens as given, or one sequence of all of t's tokens (on t's device: no host round trip)."""
    if cu is not None:
        return cu
    return torch.tensor([0, t.shape[0]], dtype=torch.int32).to(t.device, non_blocking=True)


class SageCoAttnWeight:
    """LightX2V attention weight running sage_co.sageattn (no weights; the template's hooks are no-ops)."""

    def __init__(self, weight_name=None):
        self.weight_name = weight_name
        self.config = {}

    # ---- AttnWeightTemplate's hooks (attention has no weights to load or move)
    def load(self, weight_dict):
        pass

    def set_config(self, config=None):
        if config is not None:
            self.config = config

    def to_cpu(self, non_blocking=False):
        pass

    def to_cuda(self, non_blocking=False):
        pass

    def state_dict(self, destination=None):
        return {} if destination is None else destination

    def load_state_dict(self, destination, block_index, adapter_block_index=None):
        return {}

    def load_state_dict_from_disk(self, block_index, adapter_block_index=None):
        pass

    # ---- the attention
    def apply(self, q, k, v, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None,
              **kwargs):
        attn_kwargs = {n: x for n, x in kwargs.items() if n not in CONTEXT_KWARGS}
        if q.dim() == 3:
            if cu_seqlens_q is not None or cu_seqlens_kv is not None:
                out = sageattn_varlen(q, k, v, _cu_or_whole(cu_seqlens_q, q), _cu_or_whole(cu_seqlens_kv, k),
                                      q.shape[0] if max_seqlen_q is None else max_seqlen_q,
                                      k.shape[0] if max_seqlen_kv is None else max_seqlen_kv, **attn_kwargs)
                return out.reshape(q.shape[0], -1)
            q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        elif q.dim() != 4:
            raise ValueError(f"q: expected [tokens, H, D] or [B, S, H, D], got shape {tuple(q.shape)}")
        out = sageattn(q, k, v, tensor_layout="NHD", **attn_kwargs)
        return out.reshape(q.shape[0] * q.shape[1], -1)

    def apply_with_lse(self, q, k, v, softmax_scale=None):
        """One dense block for LightX2V's RingAttn: (out [tokens, H*D], lse fp32 [tokens, H])."""
        if q.dim() == 3:
            q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        elif q.dim() != 4:
            raise ValueError(f"q: expected [tokens, H, D] or [B, S, H, D], got shape {tuple(q.shape)}")
        out, lse = sageattn(q, k, v, tensor_layout="NHD", sm_scale=softmax_scale, return_lse=True)
        B, S, H = q.shape[0], q.shape[1], q.shape[2]
        return out.reshape(B * S, -1), lse.transpose(1, 2).reshape(B * S, H)


def register(registry=None) -> None:
    """The `lightx2v.platform_plugins` entry point: add SageCoAttnWeight under KEY to LightX2V's platform
    attention registry (or to `registry`, any LightX2V-style Register). Calling it again is a no-op."""
    if registry is None:
        from lightx2v_platform.registry_factory import PLATFORM_ATTN_WEIGHT_REGISTER as registry
    if KEY in registry:
        if registry[KEY] is SageCoAttnWeight:
            return
        raise RuntimeError(f"LightX2V's attention registry already has {KEY!r} ({registry[KEY]!r}); sage-co does "
                           f"not replace it")
    registry(KEY)(SageCoAttnWeight)
