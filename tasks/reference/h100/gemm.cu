// Reference Hopper (sm_90a) bf16 GEMM: C[M,N] = A[M,K] · B[N,K]^T, fp32 accumulation, bf16 output.
//
// Design
//  * Persistent grid (one CTA per SM) walking 128x256 output tiles in grouped order (GROUP_M m-tiles
//    per band) so that concurrently running CTAs share A and B panels in L2.
//  * 384 threads = 3 warpgroups, warp-specialised:
//      - warpgroup 0: producer. One thread issues TMA loads (128B-swizzled 64-wide K slices of A and B)
//        into a 4-stage shared-memory ring; it gives its registers away (setmaxnreg.dec 40).
//      - warpgroups 1, 2: consumers (setmaxnreg.inc 232). Each owns 64 rows x 256 cols of the tile and
//        issues wgmma.m64n256k16 (A and B both K-major from shared memory via descriptors), fp32
//        accumulators in 128 registers per thread.
//  * Ring synchronisation with mbarriers: full[s] (producer arrive.expect_tx + TMA complete_tx) and
//    empty[s] (one arrival per consumer warp once its wgmmas reading stage s have retired).
//  * Ragged edges: TMA zero-fills out-of-bounds rows/columns of A and B; the epilogue converts to bf16
//    and stores bf16x2 pairs straight from the accumulator registers with bounds checks on M and N.
//  * Split-K when the tiles fill under half the SMs (small M or N): each work unit is a tile and a slice
//    of K; units add fp32 partials into the workspace (zeroed first), and a last kernel rounds it to C.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int BM = 128, BN = 256, BK = 64;      // CTA tile; BK * 2 bytes = 128 B = one swizzle row
constexpr int STAGES = 4;
constexpr int CONSUMERS = 2;                    // consumer warpgroups, BM / CONSUMERS = 64 rows each
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int GROUP_M = 16;                     // m-tiles per band of the tile order
constexpr int MIN_K_ITERS = 4;                  // least k-steps per split-K slice
constexpr int MAX_SPLITS = 16;
constexpr uint32_t A_BYTES = BM * BK * 2;       // 16 KB per stage
constexpr uint32_t B_BYTES = BN * BK * 2;       // 32 KB per stage
constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
// 1 KB slack to align the ring to the 1024 B swizzle atom, the ring, then full/empty barriers.
constexpr size_t SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n .reg .pred p;\n"
            " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            " selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// 2D tile load: coordinates are (inner = K element, outer = row).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int k, int row) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(k), "r"(row) : "memory");
}

// wgmma shared-memory descriptor for a K-major operand in 128B-swizzle layout: rows of 128 B, 8-row
// atoms of 1024 B (stride byte offset 1024), leading byte offset unused for this layout (set to 1).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits.
__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64x256] (+)= A[64x16] · B[256x16]^T; scale_d = 0 overwrites D (first k-step of a tile).
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d));
}

// Grouped tile order: bands of GROUP_M m-tiles, m fastest inside a band.
__device__ __forceinline__ void tile_origin(int t, int num_m, int num_n, int& m0, int& n0) {
    const int per_band = GROUP_M * num_n;
    const int band = t / per_band;
    const int first_m = band * GROUP_M;
    const int band_m = min(num_m - first_m, GROUP_M);
    const int r = t - band * per_band;
    m0 = (first_m + r % band_m) * BM;
    n0 = (r / band_m) * BN;
}

__global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_tn_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                    __nv_bfloat16* __restrict__ C, float* __restrict__ partial, int M, int N, int K, int splits) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t ring = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t smem_a = ring;                        // STAGES x [128 rows x 128 B]
    const uint32_t smem_b = ring + STAGES * A_BYTES;     // STAGES x [256 rows x 128 B]
    const uint32_t full_bar = smem_b + STAGES * B_BYTES; // STAGES x 8 B
    const uint32_t empty_bar = full_bar + STAGES * 8;    // STAGES x 8 B

    const int num_m = (M + BM - 1) / BM, num_n = (N + BN - 1) / BN;
    const int num_units = num_m * num_n * splits;   // (tile, K slice) pairs
    const int k_iters = (K + BK - 1) / BK;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_a)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_b)) : "memory");
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_bar + 8 * s, 1);
            mbar_init(empty_bar + 8 * s, CONSUMERS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer warpgroup ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            int s = 0;
            uint32_t phase = 0;
            for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
                int m0, n0;
                tile_origin(u / splits, num_m, num_n, m0, n0);
                const int k_end = (u % splits + 1) * k_iters / splits;
                for (int k = (u % splits) * k_iters / splits; k < k_end; ++k) {
                    mbar_wait(empty_bar + 8 * s, phase ^ 1);   // fresh barriers pass parity 1 at once
                    mbar_arrive_expect_tx(full_bar + 8 * s, STAGE_BYTES);
                    tma_load_2d(smem_a + s * A_BYTES, &tmap_a, full_bar + 8 * s, k * BK, m0);
                    tma_load_2d(smem_b + s * B_BYTES, &tmap_b, full_bar + 8 * s, k * BK, n0);
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
        }
    } else {
        // ---------------- consumer warpgroups ----------------
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int cw = wg - 1;                              // rows [64*cw, 64*cw+64) of the tile
        const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
        float acc[128];
        int s = 0;
        uint32_t phase = 0;
        for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
            int m0, n0;
            tile_origin(u / splits, num_m, num_n, m0, n0);
            const int k_begin = (u % splits) * k_iters / splits, k_end = (u % splits + 1) * k_iters / splits;
            int prev = 0;
            for (int k = k_begin; k < k_end; ++k) {
                mbar_wait(full_bar + 8 * s, phase);
                const uint64_t da = smem_desc(smem_a + s * A_BYTES + cw * 64 * 128);
                const uint64_t db = smem_desc(smem_b + s * B_BYTES);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)        // +32 B along K = +2 in the descriptor
                    wgmma_m64n256k16(acc, da + 2 * kk, db + 2 * kk, (k > k_begin || kk > 0) ? 1u : 0u);
                wgmma_commit();
                // Keep one k-step in flight; the previous one has now retired, so free its stage.
                wgmma_wait<1>();
                fence_acc(acc);
                if (k > k_begin && lane == 0) mbar_arrive(empty_bar + 8 * prev);
                prev = s;
                if (++s == STAGES) { s = 0; phase ^= 1; }
            }
            wgmma_wait<0>();
            fence_acc(acc);
            if (lane == 0) mbar_arrive(empty_bar + 8 * prev);

            // Epilogue. Accumulator layout of m64nNk16: d[4j + 2h + e] is row 16*warp + lane/4 + 8h,
            // column 8j + 2*(lane%4) + e.
            const int row = m0 + cw * 64 + warp * 16 + lane / 4;
            const int col0 = n0 + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = col0 + 8 * j;
                if (col < N) {                               // N even, col even: col + 1 < N too
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = row + 8 * h;
                        if (r >= M) continue;
                        if (splits == 1) {
                            *reinterpret_cast<__nv_bfloat162*>(C + (size_t)r * N + col) =
                                __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                        } else {
                            atomicAdd(partial + (size_t)r * N + col, acc[4 * j + 2 * h]);
                            atomicAdd(partial + (size_t)r * N + col + 1, acc[4 * j + 2 * h + 1]);
                        }
                    }
                }
            }
        }
    }
}

__global__ void zero_partial(float4* __restrict__ partial, size_t quads) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x)
        partial[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// C = bf16(partial), a pair of columns per step (N is even, so pairs never straddle rows).
__global__ void round_partial(const float2* __restrict__ partial, __nv_bfloat162* __restrict__ C, size_t pairs) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < pairs; i += (size_t)gridDim.x * blockDim.x) {
        const float2 v = partial[i];
        C[i] = __floats2bfloat162_rn(v.x, v.y);
    }
}

// Row-major [rows, K] bf16 matrix, box = box_rows x BK, 128B swizzle, out-of-bounds reads as zero.
bool encode_kmajor(CUtensorMap* map, const void* ptr, int rows, int K, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * sizeof(__nv_bfloat16)};
    const cuuint32_t box[2] = {(cuuint32_t)BK, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N,
                                     int K, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    // TMA needs 16 B aligned bases and row strides (K % 8); bf16x2 stores need N even and C 4 B aligned.
    if (M <= 0 || N <= 0 || K <= 0 || N % 8 != 0 || K % 8 != 0 || !A || !B || !C ||
        (reinterpret_cast<uintptr_t>(A) & 15) || (reinterpret_cast<uintptr_t>(B) & 15) ||
        (reinterpret_cast<uintptr_t>(C) & 3))
        return cudaErrorInvalidValue;

    CUtensorMap tmap_a, tmap_b;
    if (!encode_kmajor(&tmap_a, A, M, K, BM) || !encode_kmajor(&tmap_b, B, N, K, BN))
        return cudaErrorInvalidValue;

    int dev = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(gemm_bf16_tn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES);
    if (err != cudaSuccess) return err;

    const long long tiles = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    const size_t elements = (size_t)M * N;
    float* partial = static_cast<float*>(workspace);
    long long splits = 1;
    if (2 * tiles <= sms && partial && workspace_bytes >= elements * sizeof(float) &&
        !(reinterpret_cast<uintptr_t>(partial) & 15)) {
        const long long most = (K + BK - 1) / BK / MIN_K_ITERS;
        splits = sms / tiles;
        if (splits > most) splits = most;
        if (splits > MAX_SPLITS) splits = MAX_SPLITS;
        if (splits < 1) splits = 1;
    }
    const long long units = tiles * splits;
    const int grid = (int)(units < sms ? units : sms);
    if (splits > 1) {
        zero_partial<<<2 * sms, 256, 0, stream>>>(reinterpret_cast<float4*>(partial), elements / 4);
        err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    gemm_bf16_tn_kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(tmap_a, tmap_b, C, partial, M, N, K, (int)splits);
    err = cudaGetLastError();
    if (err != cudaSuccess || splits == 1) return err;
    round_partial<<<2 * sms, 256, 0, stream>>>(reinterpret_cast<const float2*>(partial),
                                               reinterpret_cast<__nv_bfloat162*>(C), elements / 2);
    return cudaGetLastError();
}
