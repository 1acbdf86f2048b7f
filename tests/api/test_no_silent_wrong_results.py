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


def _rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


# ------------------------------------------------------------------------------ item 2: sparsity="auto" + is_causal
def test_sparsity_auto_with_is_causal_ranks_only_visible_tiles():
    """Item 2: S=256, q near u, key tiles 0-2 near w (orthogonal to u), tile 3 near u. The predictor spent its cdf
    on the future tile 3: mask [0,0,0,1] for every query tile, so the causal attention zeroed 192 of 256 rows (LSE
    -inf) and rel L2 vs FP32 was 0.355 (dense causal 0.034)."""
    g = torch.Generator().manual_seed(1)
    B, S, H, D = 2, 256, 2, 64
    u, w = torch.linalg.qr(torch.randn(D, 2, generator=g))[0].T * 4
    q = u + 0.3 * torch.randn(B, S, H, D, generator=g)
    k = w + 0.3 * torch.randn(B, S, H, D, generator=g)
    k[:, 192:] = u + 0.3 * torch.randn(B, 64, H, D, generator=g)
    v = torch.randn(B, S, H, D, generator=g)
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    out, lse = sage_co.sage_attention(q, k, v, is_causal=True, sparsity="auto", cdf_threshold=0.9, return_lse=True,
                                      backend="emu", kernel="hip")
    ref = reference.attention_fp32(q, k, v, is_causal=True)
    assert torch.isfinite(lse).all()                       # every causal row sees key 0
    # measured 0.101 (what cdf 0.9 drops among the visible tiles; was 0.355 with a third of the rows zero)
    assert _rel_l2(out, ref) <= 0.15


# ------------------------------------------------------------------------------ item 3: sparsity="auto" + norm/RoPE
def test_sparsity_auto_predicts_on_the_normed_roped_q_k():
    """Item 3: with the fused RoPE on, the predictor saw the un-rotated q/k (cdf 0.7: rel L2 0.50 vs the FP32 roped
    attention; a mask from the roped q/k gives 0.23). The auto mask is now the mask of the prepared q/k."""
    from sage_co.sparse import predict_block_mask
    g = torch.Generator().manual_seed(2)
    B, S, H, D = 2, 300, 2, 64
    q, k = ((1 + 0.1 * torch.randn(B, S, H, D, generator=g)).to(torch.bfloat16) for _ in range(2))
    v = torch.randn(B, S, H, D, generator=g).to(torch.bfloat16)
    wq, wk = ((1 + 0.1 * torch.randn(D, generator=g)).to(torch.bfloat16) for _ in range(2))
    inv = 10000.0 ** (-torch.arange(0, D, 2).float() / D)
    ang = torch.arange(S)[:, None].float() * inv[None]
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    kw = dict(q_norm_weight=wq, k_norm_weight=wk, cos=cos, sin=sin, rope_dim=D)
    qn = reference.norm_rope(q, wq, 1e-6, cos, sin, D)
    kn = reference.norm_rope(k, wk, 1e-6, cos, sin, D)
    want = predict_block_mask(qn, kn, cdf_threshold=0.7, backend="torch")
    assert not torch.equal(want, predict_block_mask(q, k, cdf_threshold=0.7, backend="torch"))   # the test can fail
    auto = sage_co.sage_attention(q, k, v, sparsity="auto", cdf_threshold=0.7, backend="emu", kernel="hip", **kw)
    given = sage_co.sage_attention(q, k, v, block_mask=want, backend="emu", kernel="hip", **kw)
    assert torch.equal(auto.view(torch.int16), given.view(torch.int16))


# ------------------------------------------------------------------------------ item 10: predictor defaults
def test_predictor_default_threshold_keeps_the_mass():
    """Item 10: the default cdf_threshold was 0.9, which on self-similar locality blocks keeps 36 % of the tiles at
    rel L2 0.077 vs dense FP32 (twice the kernels' own error); SpargeAttn's 0.98 keeps 59 % at 0.026, next to the
    oracle mask of the true block mass (docs/numerics.md §Predictor, benchmarks/predictor_defaults.py)."""
    from benchmarks.predictor_defaults import locality_blocks, oracle_mask
    from sage_co import sparse
    assert (sparse.DEFAULT_CDF_THRESHOLD, sparse.DEFAULT_SIMTHRESHD) == (0.98, 0.6)
    q, k, v = locality_blocks(S=1000, H=2, D=64)
    dense = reference.attention_fp32(q, k, v)
    m = sparse.predict_block_mask(q, k, backend="torch")                    # the defaults
    err = _rel_l2(reference.attention_fp32(q, k, v, block_mask=m), dense)
    oracle = _rel_l2(reference.attention_fp32(q, k, v, block_mask=oracle_mask(q, k, 0.98)), dense)
    assert m.float().mean() < 1 and err <= 0.035 and err <= 1.5 * oracle, (m.float().mean(), err, oracle)


# ------------------------------------------------------------------------------ item 12: late / badly worded refusals
def test_cdf_threshold_without_sparsity_is_refused():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"cdf_threshold: only sparsity=\"auto\" uses it"):
        sage_co.sage_attention(q, k, v, cdf_threshold=5)


@pytest.mark.parametrize("fn, kw, exc, match", [
    ("sliding_tile_mask", dict(heads=-1), ValueError, "heads"),
    ("sliding_tile_mask", dict(heads=0), ValueError, "heads"),
    ("sliding_tile_mask", dict(batch=2.0), TypeError, "batch"),
    ("sliding_tile_mask", dict(heads=True), TypeError, "heads"),
    ("radial_mask", dict(heads=-1), ValueError, "heads"),
    ("radial_mask", dict(batch=2.0), TypeError, "batch"),
    ("radial_mask", dict(spatial_window=2 ** 70), ValueError, "spatial_window"),
])
def test_static_pattern_arguments_are_refused(fn, kw, exc, match):
    from sage_co import sparse
    args = dict(window=(1, 2, 2)) if fn == "sliding_tile_mask" else dict(spatial_window=2)
    args.update(kw)
    with pytest.raises(exc, match=f"^{match}: "):
        getattr(sparse, fn)((2, 8, 16), **args)


def test_selftest_out_is_checked_before_any_check(tmp_path, monkeypatch):
    """Item 12: --out naming a file failed after every check ran (16 s with --quick) as `[Errno 17] File exists`."""
    from sage_co import cli, selftest
    monkeypatch.setattr(selftest, "run", lambda *a, **k: pytest.fail("the checks ran before --out was checked"))
    bad = tmp_path / "a_file"
    bad.write_text("x")
    assert cli.main(["selftest", "--quick", "--out", str(bad)]) == 2


def test_selftest_out_error_names_the_option(tmp_path, capsys):
    from sage_co import cli
    bad = tmp_path / "a_file"
    bad.write_text("x")
    cli.main(["selftest", "--quick", "--out", str(bad)])
    err = capsys.readouterr().err
    assert err.startswith("sage-co: --out ") and "not a directory" in err, err


def test_run_with_a_bogus_kernel_launches_nothing(capsys):
    """Item 12: `sage-co run --kernel bogus` ran the three prepare kernels before refusing."""
    from sage_co import cli, launch
    with launch.recording() as rec:
        assert cli.main(["run", "-S", "64", "-H", "2", "--kernel", "bogus"]) == 2
    assert rec == []
    assert "--kernel 'bogus'" in capsys.readouterr().err


def test_shim_help_is_usage_not_a_traceback():
    r = subprocess.run([sys.executable, "-m", "sage_co.integrations.sageattention_shim", "--help"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "usage" in (r.stdout + r.stderr).lower(), r


# ------------------------------------------------------------------------------ item 11: varlen refusals
def _packed(total_q=10, total_kv=12, H=2, D=64):
    g = torch.Generator().manual_seed(4)
    return tuple(torch.randn(n, H, D, generator=g).to(torch.bfloat16) for n in (total_q, total_kv, total_kv))


NO_PAIR = dict(cu_q=[0, 10, 10], cu_kv=[0, 0, 12])   # sequence 0 has no keys, sequence 1 no queries: nothing runs


@pytest.mark.parametrize("kw, exc, match", [
    (dict(backend="bogus"), ValueError, "^backend: "),
    (dict(kernel="bogus"), ValueError, "^kernel: "),
    (dict(softmax_scale=float("nan")), ValueError, "^softmax_scale: "),
    (dict(softmax_scale="x"), TypeError, "^softmax_scale: "),
    (dict(smooth_k="yes"), TypeError, "^smooth_k: "),
])
def test_varlen_checks_every_argument_when_nothing_runs(kw, exc, match):
    """Item 11: with no sequence holding both queries and keys these were accepted and zeros returned."""
    q, k, v = _packed()
    cu_q, cu_kv = (torch.tensor(NO_PAIR[n], dtype=torch.int32) for n in ("cu_q", "cu_kv"))
    kw = dict(kw)
    scale = kw.pop("softmax_scale", None)
    with pytest.raises(exc, match=match):
        sage_co.sage_attention_varlen(q, k, v, cu_q, cu_kv, 10, 12, scale, **kw)


def test_varlen_sequences_without_keys_give_zeros():
    """Item 11: cu_seqlens_kv = [0, 0, 0] raised `k: expected at least one token ... (1, 0, 2, 64)`; sequences
    without keys are documented to give zeros and LSE -inf."""
    q, _, _ = _packed()
    k = v = torch.zeros(0, 2, 64, dtype=torch.bfloat16)
    out, lse = sage_co.sage_attention_varlen(q, k, v, torch.tensor([0, 4, 10], dtype=torch.int32),
                                             torch.tensor([0, 0, 0], dtype=torch.int64), 6, 0, return_lse=True)
    assert (out == 0).all() and torch.isinf(lse).all() and (lse < 0).all()


def test_varlen_messages_quote_the_packed_shapes_and_dtypes():
    q, k, v = _packed()
    cu_q, cu_kv = torch.tensor([0, 10], dtype=torch.int32), torch.tensor([0, 12], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"k: expected the head dim of q \(D = 64\), got shape \(12, 2, 32\)"):
        sage_co.sage_attention_varlen(q, k[..., :32], v[..., :32], cu_q, cu_kv, 10, 12)
    with pytest.raises(ValueError, match=r"int32 or int64"):
        sage_co.sage_attention_varlen(q, k, v, cu_q.float(), cu_kv, 10, 12)
    with pytest.raises(ValueError, match=r"cu_seqlens_q: expected a tensor with data .* meta"):
        sage_co.sage_attention_varlen(q, k, v, cu_q.to("meta"), cu_kv, 10, 12)
    with pytest.raises(TypeError, match=r"^sm_scale: "):
        sage_co.sageattn_varlen(q, k, v, cu_q, cu_kv, 10, 12, sm_scale="a")


# ------------------------------------------------------------------------------ item 6: pv_dtype fp16 beyond range
@pytest.mark.parametrize("entry", ["sage_attention", "sage_prepare", "reference"])
def test_pv_fp16_refuses_bf16_v_beyond_fp16(entry):
    """Item 6: one bf16 V value of 70000 with pv_dtype="fp16" filled that output channel with 3.39e38 -- finite,
    so isfinite checks passed -- where FP32 gives 58-261. Now refused, naming v, before any kernel."""
    from sage_co import launch
    q, k, v = _qkv(S_q=100, S_kv=100)
    v[0, 5, 0, 3] = 70000
    fn = {"sage_attention": lambda: sage_co.sage_attention(q, k, v, pv_dtype="fp16", backend="emu"),
          "sage_prepare": lambda: sage_co.sage_prepare(q, k, v, pv_dtype="fp16", backend="emu"),
          "reference": lambda: reference.sage_attention(q, k, v, pv_dtype="fp16")}[entry]
    with launch.recording() as rec, pytest.raises(ValueError, match=r"^v: pv_dtype=\"fp16\" .* max \|v\| = 70144"):
        fn()
    assert rec == []
    assert torch.isfinite(sage_co.sage_attention(q, k, v, backend="emu")).all()   # fp8 (scaled) serves it


# ------------------------------------------------------------------------------ item 9: exact LSE with smooth_k
def _k_offset(B, S, H, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=g).to(torch.bfloat16)
    k = (torch.randn(B, S, H, D, generator=g) + 3 * torch.randn(1, 1, 1, D, generator=g)).to(torch.bfloat16)
    v = torch.randn(B, S, H, D, generator=g).to(torch.bfloat16)
    return q, k, v


def test_smooth_k_lse_uses_the_original_q():
    """Item 9: the smooth_k LSE term used the dequantized q: max 0.094 / mean 0.020 vs FP32 at K offset 3 (S=2048,
    H=4; S=512, H=2 here: max 0.092 / mean 0.023, the error is per row and does not need the length); from the
    original q the bound of docs/numerics.md §LSE holds (<= 0.01; measured max 0.0059 / mean 0.00085)."""
    q, k, v = _k_offset(1, 512, 2, 128)
    _, ref = reference.attention_fp32(q, k, v, return_lse=True)
    _, lse = reference.sage_attention(q, k, v, smooth_k=True, return_lse=True)
    err = (lse - ref).abs()
    assert err.max() <= 0.01 and err.mean() <= 0.002, (err.max(), err.mean())
    # the shape shows the bug: the term from the dequantized q (a SagePrepared without lse_corr) breaks both bounds
    p = reference.sage_prepare(q, k, v, smooth_k=True)
    _, bug = reference.sage_attention_model(p._replace(lse_corr=None), return_lse=True)
    err = (bug - ref).abs()
    assert err.max() > 0.01 and err.mean() > 0.002, (err.max(), err.mean())


@pytest.mark.parametrize("kernel", ["hip", "asm"])
@pytest.mark.parametrize("fused", [False, True], ids=["plain", "norm_rope"])
def test_smooth_k_lse_kernels(kernel, fused):
    """The kernels (emulator) give the model's LSE (within its 1e-4 bound), with lse_corr taken from the original q
    (after the fused RMSNorm + RoPE when on, bitwise the reference term), GQA; without the fusion the bound vs FP32
    holds. (With RoPE the rotated offset is no longer a per-channel mean: k_mean is small and the error is the
    quantized scores', not the term's.)"""
    B, S, H_q, H_kv, D = 2, 200, 4, 2, 64
    q, _, _ = _k_offset(B, S, H_q, D, seed=1)
    _, k, v = _k_offset(B, S, H_kv, D, seed=2)
    kw = dict(smooth_k=True)
    if fused:
        g = torch.Generator().manual_seed(3)
        ang = torch.arange(S)[:, None] * torch.linspace(0.01, 1, 32)[None]
        kw.update(q_norm_weight=(1 + 0.1 * torch.randn(D, generator=g)).to(torch.bfloat16), rope_dim=64,
                  cos=torch.cat([ang, ang], -1).cos().bfloat16(), sin=torch.cat([ang, ang], -1).sin().bfloat16())
    _, lse = sage_co.sage_attention(q, k, v, return_lse=True, backend="emu", kernel=kernel, **kw)
    p = sage_co.sage_prepare(q, k, v, backend="emu", **kw)
    qn = reference.norm_rope(q, kw.get("q_norm_weight"), 1e-6, kw.get("cos"), kw.get("sin"), kw.get("rope_dim"))
    assert torch.equal(p.lse_corr, reference.smooth_k_lse_correction(qn, p.k_mean, D ** -0.5))
    _, model = reference.sage_attention_model(p, return_lse=True)
    assert ((lse - model).abs() <= 1e-4 * model.abs().clamp(min=1)).all()
    if not fused:
        _, ref = reference.attention_fp32(q, k, v, return_lse=True)
        assert (lse - ref).abs().max() <= 0.01
