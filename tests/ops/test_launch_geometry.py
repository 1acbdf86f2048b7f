"""Launch-layer checks (issue 11 item 10): the block must be the kernel's declared workgroup size and stay in the
dimensions its descriptor delivers ids for; the emulator refuses a descriptor that allocates fewer VGPRs than the
code uses; a launch that fails while packing is not recorded as launched."""
from __future__ import annotations

import dataclasses
import io
import struct

import pytest
import torch
from elftools.elf.elffile import ELFFile

from sage_co import abi, emu, launch, reference, registry
from sage_co.api import sage_attention_fwd
from sage_co.emu.device import EmuError

SYMBOL = "gfx1201_sage_attention_fwd_d128_bf16"   # the HIP kernel, head dim 128, bf16 out: 128 work-items, x id only


def _attention_args(S: int = 64):
    """The prepared inputs and the exact launch() arguments the attention op passes for them (captured, so the
    test follows the kernarg struct wherever sage_co/abi.py takes it)."""
    from sage_co.ops import attention
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, S, 1, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    p = reference.sage_prepare(q, k, v)
    captured = {}

    def capture(symbol, struct, grid, block, args, **kw):
        captured.update(symbol=symbol, struct=struct, grid=grid, args=args)
    real = attention.launch
    attention.launch = capture
    try:
        sage_attention_fwd(p, backend="emu", kernel="hip")
    finally:
        attention.launch = real
    assert captured["symbol"] == SYMBOL
    return p, captured["args"]





def test_the_declared_block_runs():
    p, args = _attention_args()
    launch.launch(SYMBOL, abi.ATTENTION_FWD_ARGS, (1, 1, 1), abi.ATTENTION_BLOCK, args, backend="emu")
    assert torch.equal(args["out"], reference.sage_attention_model(p))


@pytest.mark.parametrize("block, match", [
    ((64, 1, 1), r"written for workgroups of exactly \(128, 1, 1\)"),
    ((96, 1, 1), r"written for workgroups of exactly \(128, 1, 1\)"),
    ((64, 2, 1), r"written for workgroups of exactly \(128, 1, 1\)"),
])
def test_a_block_other_than_the_declared_one_is_refused(block, match):
    _, args = _attention_args()
    with launch.recording() as records:
        with pytest.raises(ValueError, match=match):
            launch.launch(SYMBOL, abi.ATTENTION_FWD_ARGS, (1, 1, 1), block, args, backend="emu")
    assert records == []


def test_a_launch_that_fails_while_packing_is_not_recorded():
    _, args = _attention_args()
    args["seq_len_kv"] = -1                                # a u32 field: refused by the packer
    before = list(launch.launched)
    history = list(launch.get_backend("emu").history)
    with launch.recording() as records:
        with pytest.raises((ValueError, OverflowError, struct.error), match="seq_len_kv"):
            launch.launch(SYMBOL, abi.ATTENTION_FWD_ARGS, (1, 1, 1), abi.ATTENTION_BLOCK, args, backend="emu")
    assert records == [] and list(launch.launched) == before
    assert list(launch.get_backend("emu").history) == history


def _with_vgpr_granule(data: bytes, symbol: str, granule: int) -> bytes:
    """The code object with the kernel descriptor's granulated_workitem_vgpr_count (rsrc1 bits 0..5) replaced:
    the wave then owns (granule + 1) * 8 VGPRs (docs/rdna4.md §Occupancy)."""
    elf = ELFFile(io.BytesIO(data))
    rodata = elf.get_section_by_name(".rodata")
    kd = next(s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name == f"{symbol}.kd")
    rsrc1_at = rodata["sh_offset"] + kd["st_value"] - rodata["sh_addr"] + 0x30
    out = bytearray(data)
    rsrc1 = struct.unpack_from("<I", out, rsrc1_at)[0]
    struct.pack_into("<I", out, rsrc1_at, (rsrc1 & ~0x3F) | granule)
    return bytes(out)


@pytest.fixture(scope="module")
def small_descriptor_module():
    k = registry.find_symbol(SYMBOL)
    data = _with_vgpr_granule(registry.load_bytes(k.file, k.sha256), SYMBOL, 7)   # 64 VGPRs; the code uses 219
    device = emu.Device()
    return device, device.load(data, "patched.co")


def test_emulator_refuses_a_descriptor_smaller_than_the_metadata(small_descriptor_module):
    device, module = small_descriptor_module
    assert module.kernels[SYMBOL].descriptor.vgpr_count == 64
    used = module.co.kernels[SYMBOL].metadata[".vgpr_count"]   # the HIP kernel's count (233 since issue 28)
    with pytest.raises(EmuError, match=f"uses {used} VGPRs but the descriptor allocates 64"):
        module.launch(SYMBOL, (1, 1, 1), (128, 1, 1), bytes(abi.ATTENTION_FWD_ARGS.size))


def test_emulator_refuses_code_touching_vgprs_past_the_descriptor(small_descriptor_module):
    """Without the metadata's count (a hand-written kernel may omit it), the run stops at the first access past
    the descriptor's VGPRs instead of using registers the wave does not own."""
    device, module = small_descriptor_module
    kernel = module.co.kernels[SYMBOL]
    md = {k: v for k, v in kernel.metadata.items() if k != ".vgpr_count"}
    module.co = dataclasses.replace(module.co, kernels={**module.co.kernels,
                                                        SYMBOL: dataclasses.replace(kernel, metadata=md)})
    module.programs.clear()
    _, args = _attention_args()
    bufs = {n: device.alloc(max(t.numel() * t.element_size(), 4)) for n, t in args.items()
            if isinstance(t, torch.Tensor)}
    packed = abi.ATTENTION_FWD_ARGS.pack({**args, **bufs})
    with pytest.raises(EmuError, match="beyond the kernel's 64 VGPRs"):
        module.launch(SYMBOL, (1, 1, 1), (128, 1, 1), packed)


def test_a_block_spanning_dimensions_without_work_item_ids_is_refused():
    """A prepare kernel (one wave32 per workgroup) reads only the x id: a 16 x 2 block of the same 32 threads is
    refused."""
    from sage_co.ops import prepare
    sym = next(k.symbol for k in registry.kernels() if k.op == prepare.PREPARE_OP)
    p = launch.plan(sym, prepare.PREPARE_ARGS)
    assert p.kernel.descriptor.enable_vgpr_workitem_id == 0
    with pytest.raises(ValueError, match="spans dimensions the kernel does not see .* only the x work-item id"):
        launch.check_geometry((1, 1, 1), (16, 2, 1), p)
    launch.check_geometry((1, 1, 1), (32, 1, 1), p)   # the block it is written for
