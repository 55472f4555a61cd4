// Loads a library at run time (a vendor GEMM could hide behind it): refused by the host allow-list.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
__global__ void fill_kernel(__nv_bfloat16* C, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = __float2bfloat16(0.f);
}

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    void* handle = dlopen("libcublas.so", RTLD_NOW);
    if (handle) dlsym(handle, "cublasGemmEx");
    fill_kernel<<<(M * N + 255) / 256, 256, 0, stream>>>(C, M * N);
    return cudaGetLastError();
}
