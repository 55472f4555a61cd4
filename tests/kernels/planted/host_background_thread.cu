// Planted (reward hack #11): the work finishes on a host thread after the launcher returned. Refused by the host allow-list (pthread_create / std::thread).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <thread>

__global__ void fill(__nv_bfloat16* C, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = __float2bfloat16(0.f);
}

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    std::thread([=] { fill<<<(M * N + 255) / 256, 256>>>(C, M * N); }).detach();
    return cudaSuccess;
}
