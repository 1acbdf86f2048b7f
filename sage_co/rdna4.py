"""gfx1201 resource facts (docs/rdna4.md §Occupancy, §Entry, §Code object) and the occupancy formula, stated once for
the kernel ABI (sage_co/abi.py: wave32 launch geometry, the predictor's LDS limit), the asm generator (register file
sizes, its header's waves per SIMD) and the performance model (tools/perfmodel/hardware.py: occupancy). The R9700's
product figures (clocks, CU count, memory bandwidth) and the model's fitted parameters stay in the model.
Torch-free, no imports.
"""
from __future__ import annotations

WAVE_SIZE = 32            # every kernel runs wave32 (docs/rdna4.md §Entry); the model calls it LANES
VGPR_LIMIT = 256          # VGPRs one wave32 may address (v255 the last encodable; §Occupancy)
SGPR_LIMIT = 106          # addressable SGPRs s0..s105; VCC sits above them (§Occupancy, §Entry)
VGPRS_PER_SIMD = 1536     # the VGPR file of one SIMD, in wave32 VGPRs (§Occupancy: 192 KiB / (32 lanes x 4 B))
VGPR_GRANULE = 24         # wave32 VGPR allocation granule (§Occupancy)
MAX_WAVES_PER_SIMD = 16   # wave slots per SIMD (§Occupancy)
SIMDS_PER_WGP = 4         # 2 CUs x 2 SIMD32 (§Throughput)
LDS_PER_WGP = 128 << 10   # LDS of one WGP (§Occupancy)
LDS_MAX_PER_WG = 64 << 10  # static + dynamic LDS one workgroup may allocate (§Occupancy, §Memory)


def waves_by_vgprs(vgprs: int) -> int:
    """§Occupancy: waves per SIMD a kernel of `vgprs` VGPRs per wave allows, min(16, floor(1536 / roundup(n, 24)))."""
    if isinstance(vgprs, bool) or not isinstance(vgprs, int) or not 1 <= vgprs <= VGPR_LIMIT:
        raise ValueError(f"vgprs: expected 1..{VGPR_LIMIT} VGPRs per wave, got {vgprs!r}")
    return min(MAX_WAVES_PER_SIMD, VGPRS_PER_SIMD // (-(-vgprs // VGPR_GRANULE) * VGPR_GRANULE))
