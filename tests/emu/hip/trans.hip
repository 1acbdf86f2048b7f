#include "common.h"
// TRANS unit: v_exp_f32, v_log_f32, v_rcp_f32, v_rsq_f32, v_sqrt_f32 through the raw builtins.
KERNEL trans_ops(float* out, const float* a, int bs) {
  int i = WG * bs + TID;
  float x = a[i];
  float* o = out + i * 5;
  o[0] = __builtin_amdgcn_exp2f(x * 0.125f);
  o[1] = __builtin_amdgcn_logf(__builtin_fabsf(x));
  o[2] = __builtin_amdgcn_rcpf(x);
  o[3] = __builtin_amdgcn_rsqf(__builtin_fabsf(x));
  o[4] = __builtin_amdgcn_sqrtf(__builtin_fabsf(x));
}
