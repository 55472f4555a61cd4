// Planted (reward hack #7): wgmma and a TMA load sit in a kernel that is never launched, so the
// library's SASS holds HGMMA and UTMALDG; a plain SIMT kernel computes C. Caught by profile: the
// required opcodes never execute.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

__global__ void tensor_core_decoy(const __grid_constant__ CUtensorMap map, __nv_bfloat16* C, uint64_t desc) {
    __shared__ alignas(128) __nv_bfloat16 tile[64 * 64];
    __shared__ alignas(8) uint64_t barrier;
    uint32_t tile_addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
    uint32_t barrier_addr = static_cast<uint32_t>(__cvta_generic_to_shared(&barrier));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %2}], [%3];"
                 :: "r"(tile_addr), "l"(&map), "r"(0), "r"(barrier_addr) : "memory");
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(desc), "l"(desc), "r"(1));
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    C[threadIdx.x] = __float2bfloat16(d0 + d1 + d2 + d3);
}

__global__ void simt_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
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
