// Reference GEMM for B200 (sm_100a): C[M,N] = A[M,K] * B[N,K]^T, bf16 in/out, fp32 accumulate.
//
// NOT RUN ON HARDWARE: built and disassembled only (no B200 was available). The bit layouts it relies on
// are spelled out next to the code that builds them.
//
// Structure (one 128 x BN output tile per CTA, BN = 256 or 128, K-block 64):
//   warp 4, lane 0 : TMA producer. A tile [128 x 64] and B tile [BN x 64], 128B-swizzled, into a ring of
//                    STAGES shared-memory stages; each stage completes on its full barrier (expect_tx).
//   warp 5, lane 0 : MMA issuer. Waits for a full stage, issues 4 x tcgen05.mma (128 x BN x 16) into the
//                    fp32 accumulator in Tensor Memory, then tcgen05.commit -> the stage's empty barrier.
//                    After the last K-block, tcgen05.commit -> accum barrier.
//                    Warp 5 also allocates/deallocates the BN TMEM columns.
//   warps 0-3      : epilogue. Warp w may only touch TMEM lanes 32w..32w+31 (= tile rows), so thread
//                    (w, lane) owns row 32w+lane: tcgen05.ld 32x32b.x32 (32 fp32 columns), convert to bf16,
//                    16-byte stores masked on M and N.
// Out-of-bounds rows/columns of A and B (ragged M, K not a multiple of 64) are zero-filled by TMA.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int BM = 128;               // tile rows = TMEM lanes used
constexpr int BK = 64;                // 64 bf16 = 128 B = exactly one 128B-swizzle row
constexpr int UMMA_K = 16;            // K of one kind::f16 MMA
constexpr int NUM_THREADS = 192;      // 4 epilogue warps + TMA warp + MMA warp
constexpr int PIPE_BYTES = 192 * 1024;
constexpr int RASTER_GROUP = 16;      // M-tiles per raster group (L2 reuse of B tiles)

template <int BN>
struct Cfg {
    static_assert(BN == 128 || BN == 256, "UMMA N must be a multiple of 16 in [16, 256]; TMEM cols a power of 2");
    static constexpr int A_BYTES = BM * BK * 2;            // 16 KiB, a multiple of 1024 (swizzle atom)
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int STAGES = PIPE_BYTES / STAGE_BYTES; // 4 (BN 256) or 6 (BN 128)
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // + slack to align the ring to 1024 B
    // Instruction descriptor, tcgen05.mma .kind::f16 (32 bits):
    //   [0,2) sparsity selector = 0   [2] sparse = 0   [3] saturate = 0
    //   [4,6) D format: 1 = F32       [7,10) A format: 1 = BF16   [10,13) B format: 1 = BF16
    //   [13] negate A = 0   [14] negate B = 0   [15] A major: 0 = K   [16] B major: 0 = K
    //   [17,23) N >> 3      [23] reserved       [24,29) M >> 4        [30,32) max shift (.ws only) = 0
    static constexpr uint32_t IDESC = (1u << 4) | (1u << 7) | (1u << 10) |
                                      (uint32_t(BN >> 3) << 17) | (uint32_t(BM >> 4) << 24);
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ----
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
// Returns once the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---- TMA ----
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// ---- tcgen05 ----
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after()  { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// Shared-memory matrix descriptor (sm100 format, 64 bits) for a K-major, 128B-swizzled tile whose rows are
// 128 B (64 bf16) and whose 8-row swizzle atoms (1024 B) are stacked densely along M/N. This is exactly
// what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and a 64-element inner box into a 1024-B-aligned buffer.
//   [0,14)  start address >> 4
//   [16,30) leading-dimension byte offset >> 4: unused for swizzled K-major when the MMA's K (32 B) lies
//           inside one 128-B swizzle row; set to 1 (16 B) by convention
//   [32,46) stride-dimension byte offset >> 4: 1024 B between consecutive 8-row groups -> 64
//   [46,49) fixed 0b001 (descriptor version for sm100)
//   [49,52) matrix base offset = 0 (atoms are 1024-B aligned)   [52] LBO mode = 0 (relative)
//   [61,64) swizzle: 0 none, 1 128B/32B-atom, 2 128B, 4 64B, 6 32B -> 2
// Advancing K by 16 elements inside the swizzle row = +32 B on the start address (+2 in the >>4 field):
// the hardware applies the XOR swizzle to the final address bits, as TMA did when writing.
__device__ __forceinline__ uint64_t sw128_kmajor_desc(uint32_t saddr) {
    return uint64_t((saddr & 0x3FFFFu) >> 4) |
           (uint64_t(16 >> 4) << 16) |
           (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 46) |
           (uint64_t(2) << 61);
}

// D[tmem] (+)= A[smem] * B[smem]^T, issued by one thread.
__device__ __forceinline__ void umma_bf16(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc,
                                          uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate) : "memory");
}
// Arrives once on the mbarrier when all tcgen05.mma previously issued by this thread have completed.
__device__ __forceinline__ void umma_commit(uint32_t bar) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                 :: "r"(bar) : "memory");
}

// TMEM address: bits [31,16] lane, [15,0] column (32-bit columns).
__device__ __forceinline__ void tmem_alloc(uint32_t slot, uint32_t ncols) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" :: "r"(slot), "r"(ncols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(taddr), "r"(ncols) : "memory");
}

// Thread `lane` of the warp gets TMEM lane (taddr.lane + lane), 32 consecutive 32-bit columns.
// The wait is in the same asm statement so no use of v[] can be scheduled before the data lands.
__device__ __forceinline__ void tmem_ld_32x32b_x32(uint32_t taddr, uint32_t (&v)[32]) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.b32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];\n\t"
                 "tcgen05.wait::ld.sync.aligned;"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7]),
                   "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]), "=r"(v[15]),
                   "=r"(v[16]), "=r"(v[17]), "=r"(v[18]), "=r"(v[19]), "=r"(v[20]), "=r"(v[21]), "=r"(v[22]), "=r"(v[23]),
                   "=r"(v[24]), "=r"(v[25]), "=r"(v[26]), "=r"(v[27]), "=r"(v[28]), "=r"(v[29]), "=r"(v[30]), "=r"(v[31])
                 : "r"(taddr) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(uint32_t lo, uint32_t hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(__uint_as_float(lo), __uint_as_float(hi));
    return *reinterpret_cast<uint32_t*>(&h);
}

template <int BN>
__global__ void __launch_bounds__(NUM_THREADS, 1)
gemm_tcgen05_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                    __nv_bfloat16* __restrict__ C, int M, int N, int K) {
    using Cf = Cfg<BN>;
    constexpr int STAGES = Cf::STAGES;

    __shared__ __align__(8) uint64_t full_bar[STAGES];   // TMA bytes landed
    __shared__ __align__(8) uint64_t empty_bar[STAGES];  // MMAs reading the stage finished
    __shared__ __align__(8) uint64_t accum_bar;          // accumulator complete in TMEM
    __shared__ uint32_t tmem_slot;
    extern __shared__ uint8_t dyn_smem[];
    // 128B swizzle (TMA and the MMA descriptor alike) assumes 1024-B aligned atoms.
    const uint32_t ring = (smem_u32(dyn_smem) + 1023u) & ~1023u;

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;

    // Grouped raster: RASTER_GROUP consecutive M-tiles sweep all N-tiles before moving on.
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int per_group = RASTER_GROUP * tiles_n;
    const int group = blockIdx.x / per_group;
    const int first_m = group * RASTER_GROUP;
    const int group_m = min(tiles_m - first_m, RASTER_GROUP);
    const int local = blockIdx.x % per_group;
    const int m0 = (first_m + local % group_m) * BM;
    const int n0 = (local / group_m) * BN;
    const int num_kb = (K + BK - 1) / BK;

    if (warp == 4 && lane == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmA)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmB)) : "memory");
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_u32(&full_bar[s]), 1);
            mbar_init(smem_u32(&empty_bar[s]), 1);
        }
        mbar_init(smem_u32(&accum_bar), 1);
        // Make the initialised barriers visible to the async proxy (TMA, tcgen05.commit).
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (warp == 5) tmem_alloc(smem_u32(&tmem_slot), BN);   // whole warp: .sync.aligned
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const uint32_t tmem_base = tmem_slot;   // lane 0, first allocated column

    if (warp == 4) {
        if (lane == 0) {
            for (int kb = 0; kb < num_kb; ++kb) {
                const int s = kb % STAGES;
                const uint32_t phase = (kb / STAGES) & 1;
                mbar_wait(smem_u32(&empty_bar[s]), phase ^ 1);   // first pass returns at once
                const uint32_t fb = smem_u32(&full_bar[s]);
                const uint32_t sa = ring + s * Cf::STAGE_BYTES;
                // The full box is counted even where TMA zero-fills out-of-bounds elements.
                mbar_expect_tx(fb, Cf::STAGE_BYTES);
                tma_load_2d(sa, &tmA, kb * BK, m0, fb);
                tma_load_2d(sa + Cf::A_BYTES, &tmB, kb * BK, n0, fb);
            }
        }
        __syncwarp();
    } else if (warp == 5) {
        if (lane == 0) {
            for (int kb = 0; kb < num_kb; ++kb) {
                const int s = kb % STAGES;
                const uint32_t phase = (kb / STAGES) & 1;
                mbar_wait(smem_u32(&full_bar[s]), phase);
                tc_fence_after();
                const uint32_t sa = ring + s * Cf::STAGE_BYTES;
                const uint64_t da = sw128_kmajor_desc(sa);
                const uint64_t db = sw128_kmajor_desc(sa + Cf::A_BYTES);
#pragma unroll
                for (int k = 0; k < BK / UMMA_K; ++k)   // +32 B per K step = +2 in the address field
                    umma_bf16(tmem_base, da + 2 * k, db + 2 * k, Cf::IDESC, (kb | k) != 0);
                umma_commit(smem_u32(&empty_bar[s]));
            }
            umma_commit(smem_u32(&accum_bar));
        }
        __syncwarp();
    } else {
        mbar_wait(smem_u32(&accum_bar), 0);
        __syncwarp();   // tcgen05.ld is .sync.aligned
        tc_fence_after();
        const int row = m0 + warp * 32 + lane;
        const uint32_t trow = tmem_base + (uint32_t(warp * 32) << 16);
        for (int c = 0; c < BN; c += 32) {
            if (n0 + c >= N) break;   // warp-uniform
            uint32_t v[32];
            tmem_ld_32x32b_x32(trow + c, v);
            if (row < M) {
                __nv_bfloat16* dst = C + size_t(row) * N + n0 + c;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    // N % 8 == 0, so each 8-column chunk is either wholly inside or wholly outside.
                    if (n0 + c + 8 * j < N) {
                        uint4 pk;
                        pk.x = pack_bf16x2(v[8 * j + 0], v[8 * j + 1]);
                        pk.y = pack_bf16x2(v[8 * j + 2], v[8 * j + 3]);
                        pk.z = pack_bf16x2(v[8 * j + 4], v[8 * j + 5]);
                        pk.w = pack_bf16x2(v[8 * j + 6], v[8 * j + 7]);
                        *reinterpret_cast<uint4*>(dst + 8 * j) = pk;
                    }
                }
            }
        }
    }

    // All TMEM reads done before the allocating warp frees the columns.
    tc_fence_before();
    __syncthreads();
    if (warp == 5) {
        tc_fence_after();
        tmem_dealloc(tmem_base, BN);
    }
}

// Row-major [rows, K] bf16 matrix, box [box_rows, 64], 128B swizzle, zero fill out of bounds.
bool encode_kmajor(CUtensorMap* map, const void* ptr, int rows, int K, int box_rows) {
    const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(K) * 2};
    const cuuint32_t box[2] = {cuuint32_t(BK), cuuint32_t(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int BN>
cudaError_t launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                   cudaStream_t stream) {
    CUtensorMap tmA, tmB;
    if (!encode_kmajor(&tmA, A, M, K, BM) || !encode_kmajor(&tmB, B, N, K, BN)) return cudaErrorInvalidValue;
    cudaError_t err = cudaFuncSetAttribute(gemm_tcgen05_kernel<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Cfg<BN>::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    const unsigned tiles = unsigned((M + BM - 1) / BM) * unsigned((N + BN - 1) / BN);
    gemm_tcgen05_kernel<BN><<<tiles, NUM_THREADS, Cfg<BN>::SMEM_BYTES, stream>>>(tmA, tmB, C, M, N, K);
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                     int M, int N, int K, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
    (void)workspace;
    (void)workspace_bytes;
    if (M <= 0 || N <= 0 || K <= 0 || K % 8 != 0 || N % 8 != 0) return cudaErrorInvalidValue;
    // TMA needs 16-B aligned bases (row pitch K*2 is a multiple of 16); the epilogue stores 16 B.
    if ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) | reinterpret_cast<uintptr_t>(C)) & 15)
        return cudaErrorInvalidValue;
    int dev = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    // 128x256 tiles when they fill the GPU at least once, else 128x128 (small N or small M).
    const long tiles256 = long((M + BM - 1) / BM) * long((N + 255) / 256);
    return tiles256 >= sms ? launch<256>(A, B, C, M, N, K, stream) : launch<128>(A, B, C, M, N, K, stream);
}
