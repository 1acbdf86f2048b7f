"""docs/numerics.md §Finite range: finite inputs inside the supported range give a finite output and LSE, in the
reference and in both shipped attention kernels; softmax_scale beyond the bound is refused (issue 11 item 3)."""
from __future__ import annotations

import math

import pytest
import torch

from sage_co import api, launch, reference, validate

BF16_MAX = torch.finfo(torch.bfloat16).max
B, S, H = 1, 64, 1


def _signs(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.where(torch.rand(B, S, H, 128, generator=g) < 0.5, -1.0, 1.0)


def _randn(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, S, H, 128, generator=g).to(torch.bfloat16)


def test_round_saturating_clamps_overflow_and_keeps_nan():
    x = torch.tensor([3.3895313892515355e38, 3.3961e38, 3.4e38, math.inf, -math.inf, -3.4e38, math.nan, 1.0])
    y = reference.round_saturating(x, torch.bfloat16)
    assert y[:4].float().eq(BF16_MAX).all() and y[4:6].float().eq(-BF16_MAX).all()
    assert torch.isnan(y[6]) and y[7] == 1.0


@pytest.mark.parametrize("kernel", ["hip", "asm"])
def test_v_at_bf16_max_gives_finite_output(kernel):
    """Before: V = +-bf16 max rounded a quarter of the outputs to +inf (the fp8 weights sum past l)."""
    q, k = _randn(1), _randn(2)
    v = (_signs(3)[:, :1] * BF16_MAX).expand(B, S, H, 128).to(torch.bfloat16).contiguous()  # one sign per channel
    model = reference.sage_attention(q, k, v)
    assert torch.isfinite(model.float()).all()
    assert model.float().abs().max() == BF16_MAX       # the saturation is reached: the test exercises it
    out = api.sage_attention(q, k, v, kernel=kernel, backend="emu")
    assert torch.equal(out, model)


@pytest.mark.parametrize("smooth_k", [False, True])
@pytest.mark.parametrize("kernel", ["hip", "asm"])
def test_range_corners_give_finite_output_and_lse(kernel, smooth_k):
    """|q| = |k| = 2^24 with softmax_scale = 2^64 and V at bf16 max: the corner of the supported range."""
    scale = validate.MAX_SOFTMAX_SCALE
    q = (_signs(4) * validate.MAX_QK_ABS).to(torch.bfloat16)
    k = (_signs(5) * validate.MAX_QK_ABS).to(torch.bfloat16)
    v = (_signs(6) * BF16_MAX).to(torch.bfloat16)
    validate.check_finite_range(q, k, scale)
    model, model_lse = reference.sage_attention(q, k, v, scale, smooth_k=smooth_k, return_lse=True)
    assert torch.isfinite(model.float()).all() and torch.isfinite(model_lse).all()
    out, lse = api.sage_attention(q, k, v, scale, smooth_k=smooth_k, return_lse=True, kernel=kernel, backend="emu")
    assert torch.isfinite(out.float()).all() and torch.isfinite(lse).all()
    assert torch.equal(out, model)
    assert torch.allclose(lse, model_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scale", [1e38, -1e38, 2.0 ** 64 * (1 + 2 ** -52), 1e300])
def test_softmax_scale_beyond_the_bound_is_refused_before_any_launch(scale):
    q, k, v = _randn(7), _randn(8), _randn(9)
    before = len(launch.launched)
    for fn in (api.sage_attention, api.sage_prepare, reference.sage_attention, reference.sage_prepare):
        with pytest.raises(ValueError, match="^softmax_scale: .*2\\*\\*64"):
            fn(q, k, v, scale)
    assert len(launch.launched) == before


def test_softmax_scale_at_the_bound_is_accepted():
    assert validate.check_softmax_scale(-(2.0 ** 64)) == -(2.0 ** 64)
    assert validate.check_softmax_scale(2 ** 64) == 2.0 ** 64


def test_check_finite_range_names_the_argument():
    q, k = _randn(10), _randn(11)
    validate.check_finite_range(q, k)
    big = q.clone()
    big[0, 3, 0, 5] = 2.0 ** 25
    with pytest.raises(ValueError, match="^q: max \\|q\\|"):
        validate.check_finite_range(big, k)
    with pytest.raises(ValueError, match="^k: max \\|k\\|"):
        validate.check_finite_range(q, big)
    nan = k.clone()
    nan[0, 0, 0, 0] = math.nan
    with pytest.raises(ValueError, match="^k: "):
        validate.check_finite_range(q, nan)
