// Does not compile: a missing semicolon.
#include <cuda_runtime.h>
extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    int x = 1
    return cudaSuccess;
}
