#include "common.h"
// Cross-lane: DPP row_shr:1 and quad_perm, permlanex16, ds_swizzle (xor 1 pattern and broadcast), readfirstlane.
KERNEL lane_ops(u32* out, const u32* a, int bs) {
  int i = WG * bs + TID;
  int x = (int)a[i];
  u32* o = out + i * 5;
  o[0] = (u32)__builtin_amdgcn_update_dpp(0, x, 0x111, 0xf, 0xf, false);           // row_shr:1, lane 0 of a row gets 0
  o[1] = (u32)__builtin_amdgcn_update_dpp(0, x, 0x1b, 0xf, 0xf, false);            // quad_perm [3,2,1,0]
  o[2] = (u32)__builtin_amdgcn_permlanex16(0, x, 0x76543210, 0xfedcba98, false, false);
  o[3] = (u32)__builtin_amdgcn_ds_swizzle(x, 0x041f);                              // bitmask mode: lane ^ 1
  o[4] = (u32)__builtin_amdgcn_readfirstlane(x) + (u32)__builtin_amdgcn_ds_swizzle(x, 0x8055); // quad perm [1,1,1,1]
}
