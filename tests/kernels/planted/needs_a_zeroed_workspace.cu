// Planted: split-K with fp32 atomics into the workspace, which it never clears: right only where the harness
// hands it a zeroed workspace, i.e. the clearing a vendor library pays for inside its call is left to the
// harness's setup, outside the timed span. The harness poisons the workspace before every call: check fails.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int SPLITS = 2;

__global__ void partial_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, float* acc, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    const int begin = blockIdx.z * K / SPLITS, end = (blockIdx.z + 1) * K / SPLITS;
    float sum = 0.f;
    for (int k = begin; k < end; ++k)
        sum += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
    atomicAdd(acc + (size_t)row * N + col, sum);
}

__global__ void round_out(const float* acc, __nv_bfloat16* C, size_t count) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < count) C[i] = __float2bfloat16(acc[i]);
}

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (workspace_bytes < 4 * (size_t)M * N) return cudaErrorInvalidValue;
    float* acc = static_cast<float*>(workspace);
    // CLEAR
    dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16, SPLITS);
    partial_gemm<<<grid, block, 0, stream>>>(A, B, acc, M, N, K);
    const size_t count = (size_t)M * N;
    round_out<<<(unsigned)((count + 255) / 256), 256, 0, stream>>>(acc, C, count);
    return cudaGetLastError();
}
