// Slow to compile on purpose (90,000 distinct template instantiations: about a minute of cudafe++ and cicc,
// and more than a gigabyte): for the tests of the build's timeout, memory cap and process tree.
#include <cuda_runtime.h>

#include <utility>

template <int I, int J>
struct Product {
    static constexpr long value = static_cast<long>(I) * J + 1;
};
template <int I, int... J>
constexpr long row(std::integer_sequence<int, J...>) {
    return (Product<I, J>::value + ...);
}
template <int... I>
constexpr long table(std::integer_sequence<int, I...>) {
    return (row<I>(std::make_integer_sequence<int, 300>{}) + ...);
}
static_assert(table(std::make_integer_sequence<int, 300>{}) > 0, "slow on purpose");

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    return cudaSuccess;
}
