"""Host-side orchestration of the shipped kernels: kernarg declarations, launch geometry, passes."""
