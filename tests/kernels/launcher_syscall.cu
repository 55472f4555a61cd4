// Enters the kernel with a raw syscall instruction, bypassing every import: refused by inspect.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void fill_kernel(__nv_bfloat16* C, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = __float2bfloat16(0.f);
}

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    long pid;
    asm volatile("syscall" : "=a"(pid) : "a"(39L) : "rcx", "r11", "memory");  // getpid
    if (pid < 0) return cudaErrorUnknown;
    fill_kernel<<<(M * N + 255) / 256, 256, 0, stream>>>(C, M * N);
    return cudaGetLastError();
}
