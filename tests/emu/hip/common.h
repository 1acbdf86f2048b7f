// Headers-free HIP for gfx1201: just what the corpus kernels need (no hidden kernel arguments are used).
#pragma once
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define KERNEL extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, 256))) void
#define TID ((int)__builtin_amdgcn_workitem_id_x())
#define WG ((int)__builtin_amdgcn_workgroup_id_x())
typedef unsigned int u32;
typedef int v2i __attribute__((ext_vector_type(2)));
typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v8f __attribute__((ext_vector_type(8)));
typedef _Float16 v8h __attribute__((ext_vector_type(8)));
typedef __bf16 v8bf __attribute__((ext_vector_type(8)));
