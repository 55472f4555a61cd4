// Planted: never returns (the kernel spins on a flag nothing sets). Caught by check: the evaluation
// child is killed at the call timeout and the test fails; the next test runs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void simt_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    volatile int* flag = reinterpret_cast<volatile int*>(C);
    while (flag[0] != 0x12345678) { }
    float sum = 0.f;
    for (int k = 0; k < K; ++k) sum += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2bfloat16(sum);
}

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
    simt_gemm<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
    return cudaGetLastError();
}
