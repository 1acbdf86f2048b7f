"""A tiny randomly initialized diffusers FluxTransformer2DModel (bf16, CPU): 1 joint + 1 single block, 2 heads of
128 (sage-co's head dim today), 16 text + 48 image tokens -> one 64-token joint attention per block."""
from __future__ import annotations

import torch

N_ATTENTION = 2  # attention calls per forward: one in the joint block, one in the single block


def build():
    from diffusers import FluxTransformer2DModel
    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, out_channels=None, num_layers=1, num_single_layers=1,
                                   attention_head_dim=128, num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, guidance_embeds=False, axes_dims_rope=(16, 56, 56))
    return model.to(torch.bfloat16).eval()


def inputs():
    g = torch.Generator().manual_seed(1)
    img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(6.0), torch.arange(8.0), indexing="ij"),
                          dim=-1).reshape(-1, 3)
    return dict(hidden_states=torch.randn(1, 48, 8, generator=g).to(torch.bfloat16),
                encoder_hidden_states=torch.randn(1, 16, 32, generator=g).to(torch.bfloat16),
                pooled_projections=torch.randn(1, 32, generator=g).to(torch.bfloat16),
                timestep=torch.tensor([0.5], dtype=torch.bfloat16), img_ids=img_ids, txt_ids=torch.zeros(16, 3))


def forward(model):
    with torch.no_grad():
        return model(**inputs()).sample
