"""The prepare stage's model (docs/performance.md §The prepare stage): the bytes each launch moves, where they come
from (DRAM or the 64 MiB Infinity Cache), and the launches. The stage is modeled as memory-bound (instruction issue
needs about an eighth of the memory time, same section), so its time is its traffic at the slower of the two
rates plus a fixed cost per launch. Every figure here is MODELED.

Two cases:
  cold      Q, K, V start in DRAM: their first read comes from DRAM; a second read of the same tensor (V always:
            its per-channel scale needs every token before any token is quantized; K with smooth_k) comes from the
            Infinity Cache when that tensor fits it, else from DRAM again.
  resident  Q, K, V were just written by the projection GEMM and are still in the Infinity Cache (as far as the
            three fit it together; the rest comes from DRAM): the op as a model layer meets it.
Either way the int8/fp8 outputs are written back to DRAM (counted as DRAM traffic: write-back runs concurrently),
and every byte, DRAM or not, passes the Infinity Cache: time = max(DRAM bytes / DRAM rate, all bytes / cache rate).
"""
from __future__ import annotations

from perfmodel.hardware import CALIBRATED, DRAM_BYTES_PER_S, INFINITY_CACHE, Params

HEAD_DIM = 128
IN_BYTES = 2            # bf16 / fp16 inputs
OUT_BYTES = 1           # int8 Q and K, fp8 V
PREPARE_LAUNCHES = 1    # statistics, their fold and the quantization in one launch (sage_co/ops/prepare.py)
PREPARE_LAUNCHES_BEFORE = 3   # stats, reduce, quant (before issue 28)
CASES = ("cold", "resident")


def traffic(B: int, H: int, S: int, *, case: str = "cold", smooth_k: bool = False, D: int = HEAD_DIM,
            in_bytes: int = IN_BYTES) -> dict:
    """Bytes the prepare moves at (B, H = H_q = H_kv, S_q = S_kv = S, D), split into DRAM and Infinity-Cache hits
    (scales and the small per-channel partials are left out: < 0.1 % at S >= 1536). in_bytes: per input element
    (2: bf16/fp16; 4: fp32 inputs, issue 30)."""
    if case not in CASES:
        raise ValueError(f"case: expected one of {CASES}, got {case!r}")
    t = B * S * H * D * in_bytes                  # one input tensor
    reads_first = 3 * t                           # Q, K, V once each
    second = t * (2 if smooth_k else 1)           # V again (and K again with smooth_k)
    writes = 3 * B * S * H * D * OUT_BYTES        # q/k int8, V^T fp8
    if case == "cold":
        first_dram = reads_first
        second_dram = 0 if t <= INFINITY_CACHE else second
    else:
        resident = min(1.0, INFINITY_CACHE / reads_first)   # the share of Q, K, V still in the cache
        first_dram = reads_first * (1.0 - resident)
        second_dram = 0 if t <= INFINITY_CACHE else second
    dram = first_dram + second_dram + writes
    total = reads_first + second + writes
    return {"dram_bytes": dram, "cache_bytes": total - dram, "total_bytes": total}


def prepare_seconds(B: int, H: int, S: int, params: Params = CALIBRATED, *, case: str = "cold",
                    smooth_k: bool = False, launches: int = PREPARE_LAUNCHES, in_bytes: int = IN_BYTES) -> float:
    """Modeled prepare time: max(DRAM bytes at 640 GB/s, all bytes at the Infinity Cache rate) + launches x the
    per-launch overhead (hardware.Params.launch_overhead_s, ASSUMED)."""
    tr = traffic(B, H, S, case=case, smooth_k=smooth_k, in_bytes=in_bytes)
    memory = max(tr["dram_bytes"] / DRAM_BYTES_PER_S, tr["total_bytes"] / params.infinity_cache_bytes_per_s)
    return memory + launches * params.launch_overhead_s
