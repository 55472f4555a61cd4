// Not a cheat: a library that calls abort() as it is loaded, so the child's death must read as SIGABRT,
// sandbox or not (as the first process of a PID namespace, the child once turned it into SIGSEGV).
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void unused(float* out) { out[threadIdx.x] = 0.f; }

__attribute__((constructor)) static void end_at_once() { abort(); }

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    unused<<<1, 1, 0, stream>>>(reinterpret_cast<float*>(C));
    return cudaGetLastError();
}
