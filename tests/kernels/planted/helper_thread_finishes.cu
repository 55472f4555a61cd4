// Planted (reward hack #11, deferred work): the launcher computes the first half of C's rows on its stream and
// leaves the rest to a helper thread that launches it a moment later, after the call has returned (in the old
// evaluation child the thread's kernel could land outside the timed window). Defeated by design: only what
// the launcher put on its stream while it was captured is ever replayed, so the second half is never written.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <unistd.h>

__global__ void simt_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K, int first) {
    int row = first + blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float sum = 0.f;
    for (int k = 0; k < K; ++k) sum += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2bfloat16(sum);
}

namespace {
struct Rest {
    const __nv_bfloat16 *A, *B;
    __nv_bfloat16* C;
    int M, N, K;
} rest;

void* finish_later(void*) {
    usleep(200 * 1000);
    dim3 block(16, 16), grid((rest.N + 15) / 16, (rest.M - rest.M / 2 + 15) / 16);
    simt_gemm<<<grid, block>>>(rest.A, rest.B, rest.C, rest.M, rest.N, rest.K, rest.M / 2);
    cudaDeviceSynchronize();
    return nullptr;
}
}  // namespace

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    dim3 block(16, 16), grid((N + 15) / 16, (M / 2 + 15) / 16);
    simt_gemm<<<grid, block, 0, stream>>>(A, B, C, M / 2, N, K, 0);
    rest = {A, B, C, M, N, K};
    pthread_t helper;
    pthread_create(&helper, nullptr, finish_later, nullptr);
    pthread_detach(helper);
    return cudaGetLastError();
}
