/*
 * ptx_griddep.cuh - programmatic dependent launch (griddepcontrol): a kernel
 * launched with cudaLaunchAttributeProgrammaticStreamSerialization may start
 * while the kernel before it on the stream still runs, and waits for that
 * kernel inside, after its own launch and set-up. Minimum arch: sm_90; on
 * older targets both calls compile to nothing (and the host must not ask for
 * the attribute there, so the kernels run one after the other as usual).
 *
 * Contract: griddep_wait() returns once every prerequisite grid has completed
 * and its memory operations are visible; a kernel must call it before it
 * touches memory an earlier kernel writes. griddep_launch_dependents() lets
 * the next kernel's blocks be scheduled once every block of this grid has
 * called it or exited; it orders nothing, so it may come first.
 */
#ifndef SDPA_PTX_GRIDDEP_CUH
#define SDPA_PTX_GRIDDEP_CUH

__device__ __forceinline__ void griddep_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void griddep_launch_dependents(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

#endif /* SDPA_PTX_GRIDDEP_CUH */
