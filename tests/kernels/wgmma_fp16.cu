// One wgmma (fp16 in, fp32 accumulate): fails a bf16 task's modifier match.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

__global__ void wgmma_kernel(__nv_bfloat16* C, uint64_t desc_a, uint64_t desc_b, int n) {
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "l"(desc_a), "l"(desc_b), "r"(n));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = __float2bfloat16(d0 + d1 + d2 + d3);
}

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    wgmma_kernel<<<(M * N + 127) / 128, 128, 0, stream>>>(C, 0, 0, M * N);
    return cudaGetLastError();
}
