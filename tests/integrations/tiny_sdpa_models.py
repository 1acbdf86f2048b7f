"""Tiny randomly initialized diffusers models whose attention processors call F.scaled_dot_product_attention
directly (not diffusers' dispatcher): SD3Transformer2DModel (JointAttnProcessor2_0, SD3.5's dual attention and
RMS qk-norm) and CogVideoXTransformer3DModel (CogVideoXAttnProcessor2_0). bf16, CPU, B = 2, 2 heads of 64 (the
head dim of both families), token counts not multiples of 64."""
from __future__ import annotations

import torch

# SD3: 2 blocks; block 0 has dual attention (joint + image self-attention), block 1 the joint one: 3 SDPA calls.
SD3_SDPA_CALLS = 3
# CogVideoX: 2 blocks, one joint text+video attention each.
COGVIDEOX_SDPA_CALLS = 2


def build_sd3():
    from diffusers import SD3Transformer2DModel
    torch.manual_seed(0)
    model = SD3Transformer2DModel(sample_size=12, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=64,
                                  num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=128,
                                  pooled_projection_dim=32, out_channels=4, pos_embed_max_size=12,
                                  dual_attention_layers=(0,), qk_norm="rms_norm")
    return model.to(torch.bfloat16).eval()


def sd3_inputs():
    g = torch.Generator().manual_seed(1)
    # 10 x 12 latent, patch 2 -> 30 image tokens; 13 text tokens -> 43-token joint attention
    return dict(hidden_states=torch.randn(2, 4, 10, 12, generator=g).to(torch.bfloat16),
                encoder_hidden_states=torch.randn(2, 13, 32, generator=g).to(torch.bfloat16),
                pooled_projections=torch.randn(2, 32, generator=g).to(torch.bfloat16),
                timestep=torch.tensor([500, 250]))


def build_cogvideox():
    from diffusers import CogVideoXTransformer3DModel
    torch.manual_seed(0)
    model = CogVideoXTransformer3DModel(num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4,
                                        time_embed_dim=32, text_embed_dim=32, num_layers=2, sample_width=6,
                                        sample_height=6, sample_frames=5, patch_size=2, max_text_seq_length=11)
    return model.to(torch.bfloat16).eval()


def cogvideox_inputs():
    g = torch.Generator().manual_seed(1)
    # 2 latent frames of 6 x 6, patch 2 -> 18 video tokens; 11 text tokens -> 29-token joint attention
    return dict(hidden_states=torch.randn(2, 2, 4, 6, 6, generator=g).to(torch.bfloat16),
                encoder_hidden_states=torch.randn(2, 11, 32, generator=g).to(torch.bfloat16),
                timestep=torch.tensor([500, 250]))


def forward(model, inputs):
    with torch.no_grad():
        return model(**inputs).sample
