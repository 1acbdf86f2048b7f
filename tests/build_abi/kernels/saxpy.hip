// Headers-free HIP test kernel for the build pipeline: y[i] = a * x[i] + y[i] for i < n.
#define __global__ __attribute__((global))
extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, 256)))
void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = __builtin_amdgcn_workgroup_id_x() * 256u + __builtin_amdgcn_workitem_id_x();
    if (i < n) y[i] = __builtin_fmaf(a, x[i], y[i]);
}
