// Reference Hopper (sm_90a) attention forward: O = softmax(Q·Kᵀ·scale [+ causal mask])·V and the
// natural-log LSE of every row, Q, K, V, O as [B, H, S, D] bf16, LSE [B, H, S] fp32.
//
// Design (FlashAttention-3 style, one CTA per 128 query rows of one head)
//  * 384 threads = 3 warpgroups, warp-specialised:
//      - warpgroup 0: producer (setmaxnreg.dec 24). One thread issues TMA loads: the CTA's Q tile once,
//        then the K and V blocks into a ring of STAGES slots (K and V on separate barriers, so that Q·Kᵀ
//        starts before V has landed).
//      - warpgroups 1, 2: consumers (setmaxnreg.inc 240), 64 query rows each. Per key block:
//        S = Q·Kᵀ with wgmma (A = Q, B = K, both K-major in shared memory), masking on the ragged and
//        causal edges, online softmax in base 2 in registers, then O += P·V with wgmma taking P from
//        registers (the fp32 accumulator layout of S, packed to bf16 pairs, is the A-fragment layout)
//        and V from shared memory as an MN-major operand (trans-b).
//  * Shared memory: every tile is stored as 64-column panels ([rows x 64] bf16 = rows x 128 B) with the
//    128B swizzle, written by 3D TMA boxes {64, rows, 1} over the tensor {D, S, B*H}; TMA zero-fills rows
//    past S and columns past D (D = 96 uses two panels, the second half empty).
//    Layout: [Q: DP panels x BM rows][K ring: STAGES x DP x BN rows][V ring: same][mbarriers].
//  * Descriptors: K-major operands (Q, K) step 32 B along a panel per k16 and jump panels every 4 steps;
//    8-row atoms are 1024 B apart (SBO). V as MN-major: a k16 step covers 16 key rows (2048 B); one wgmma
//    of n = 64 * DP reads every panel, the panels a leading byte offset apart; 8-key atoms are 1024 B apart.
//  * Causal: CTAs take query blocks from the last (longest) to the first; key blocks past the diagonal
//    are not loaded; a consumer warpgroup whose rows are all above a block skips its arithmetic.
//  * Epilogue: O scaled by 1/l, rounded to bf16 and transposed within each quad of lanes so that every lane
//    stores 16 B row pieces (pack_pieces); LSE = (m + log2 l)·ln 2.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int BM = 128;                       // query rows per CTA, 64 per consumer warpgroup
constexpr int CONSUMERS = 2;
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

template <int D_>
struct Config {
    static constexpr int D = D_;
    static constexpr int DP = (D + 63) / 64;              // 64-column panels
    static constexpr int BN = D > 128 ? 64 : 128;         // keys per block
    static constexpr int STAGES = D <= 64 ? 4 : 2;
    static constexpr int S_REGS = BN / 2;                 // fp32 score accumulators per thread
    static constexpr uint32_t PANEL_Q = BM * 128;
    static constexpr uint32_t PANEL_KV = BN * 128;
    static constexpr uint32_t Q_BYTES = DP * PANEL_Q;
    static constexpr uint32_t KV_BYTES = DP * PANEL_KV;   // one K or V block
    static constexpr size_t SMEM = 1024 + Q_BYTES + 2 * STAGES * KV_BYTES + (1 + 4 * STAGES) * 8;
};

// The bf16 pair (lo, hi) as one 32-bit word, lo in the low half.
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&pair);
}

// A consumer warpgroup's finished 64 x (16 * PIECES) accumulator tile, rounded to bf16 in 16 B row pieces. In the
// m64nNk16 layout a quad of lanes (one row pair) holds each 8-column group as four bf16 pairs, one per lane; two
// shuffle rounds transpose the quad's groups 4i .. 4i+3 so that lane q = lane % 4 holds all of group 4i + q:
// piece[i][h] is row 16*warp + lane/4 + 8h, columns 32i + 8q .. + 7. A 16 B store per piece replaces four 4 B
// stores (1-4% of this kernel's time on the H200; the same helper as the GEMM reference's, kept in both so that each
// reference stays one self-contained file).
template <int R, int PIECES>
__device__ __forceinline__ void pack_pieces(const float (&d)[R], uint4 (&piece)[PIECES][2], int q) {
    static_assert(R == 16 * PIECES, "16 accumulators per piece and row pair");
#pragma unroll
    for (int i = 0; i < PIECES; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t x[4];   // x[s]: this lane's pair of group 4i + s, then the pair of lane s in group 4i + q
#pragma unroll
            for (int s = 0; s < 4; ++s) x[s] = bf16_pair(d[4 * (4 * i + s) + 2 * h], d[4 * (4 * i + s) + 2 * h + 1]);
#pragma unroll
            for (int bit = 1; bit <= 2; bit <<= 1) {   // swap with lane q ^ bit the slots whose bit differs from q's
                const bool up = q & bit;
                const uint32_t lo = __shfl_xor_sync(0xffffffffu, up ? x[0] : x[bit], bit);
                const uint32_t hi = __shfl_xor_sync(0xffffffffu, up ? x[3 - bit] : x[3], bit);
                if (up) {
                    x[0] = lo;
                    x[3 - bit] = hi;
                } else {
                    x[bit] = lo;
                    x[3] = hi;
                }
            }
            piece[i][h] = make_uint4(x[0], x[1], x[2], x[3]);
        }
    }
}

// Stores parts [first, end) of PARTS equal parts of a packed tile (see pack_pieces), bounds-checked; row and col
// are the thread's piece [0][0]. N % 8 == 0, so a piece is either wholly inside N or wholly outside.
template <int PARTS, int PIECES>
__device__ __forceinline__ void store_pieces(__nv_bfloat16* C, const uint4 (&piece)[PIECES][2], int row, int col,
                                             int M, int N, int first, int end) {
#pragma unroll
    for (int p = 0; p < PARTS; ++p) {
        if (p < first || p >= end) continue;
#pragma unroll
        for (int i = p * PIECES / PARTS; i < (p + 1) * PIECES / PARTS; ++i) {
            if (col + 32 * i >= N) continue;
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (row + 8 * h < M) *reinterpret_cast<uint4*>(C + (size_t)(row + 8 * h) * N + col + 32 * i) = piece[i][h];
        }
    }
}

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

// 3D tile load: coordinates (column d, row s, head b*H + h).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int d, int s, int bh) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(d), "r"(s), "r"(bh) : "memory");
}

// wgmma shared-memory descriptor, 128B swizzle, 8-row atoms of 1024 B. For a K-major operand the stride
// byte offset (1024) steps between 8-row atoms along M/N and the leading offset is unused; for the
// MN-major V panels (64 columns = one atom wide) 1024 B steps between 8-key atoms along K. Both offsets
// are set to 1024 here; accumulate_pv sets the leading offset of V's descriptors to the stride between panels
// (measured: a wgmma spanning several panels reads them there).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// Pins register values at this point of the program (around wgmma fences and waits).
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// D[64x128] (+)= A[64x16] · B[128x16]^T: A and B K-major in shared memory (128B swizzle).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

// D[64x64] (+)= A[64x16] · B[64x16]^T: A and B K-major in shared memory (128B swizzle).
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

// D[64x64] (+)= A[64x16] · B[16x64]: A as bf16 pairs in registers (accumulator layout), B MN-major
// in shared memory (the trans-b immediate is 1).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// D[64x128] (+)= A[64x16] · B[16x128]: A from registers, B MN-major over 2 panels (see accumulate_pv); d holds
// the 2 64-column blocks of D side by side, each in the m64n64 accumulator layout.
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[2][32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.eq.u32 p, 1, 1;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[0][4]), "+f"(d[0][5]),
          "+f"(d[0][6]), "+f"(d[0][7]), "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[0][10]), "+f"(d[0][11]),
          "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[0][14]), "+f"(d[0][15]), "+f"(d[0][16]), "+f"(d[0][17]),
          "+f"(d[0][18]), "+f"(d[0][19]), "+f"(d[0][20]), "+f"(d[0][21]), "+f"(d[0][22]), "+f"(d[0][23]),
          "+f"(d[0][24]), "+f"(d[0][25]), "+f"(d[0][26]), "+f"(d[0][27]), "+f"(d[0][28]), "+f"(d[0][29]),
          "+f"(d[0][30]), "+f"(d[0][31]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
          "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[1][6]), "+f"(d[1][7]), "+f"(d[1][8]), "+f"(d[1][9]),
          "+f"(d[1][10]), "+f"(d[1][11]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[1][14]), "+f"(d[1][15]),
          "+f"(d[1][16]), "+f"(d[1][17]), "+f"(d[1][18]), "+f"(d[1][19]), "+f"(d[1][20]), "+f"(d[1][21]),
          "+f"(d[1][22]), "+f"(d[1][23]), "+f"(d[1][24]), "+f"(d[1][25]), "+f"(d[1][26]), "+f"(d[1][27]),
          "+f"(d[1][28]), "+f"(d[1][29]), "+f"(d[1][30]), "+f"(d[1][31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// D[64x256] (+)= A[64x16] · B[16x256]: A from registers, B MN-major over 4 panels (see accumulate_pv); d holds
// the 4 64-column blocks of D side by side, each in the m64n64 accumulator layout.
__device__ __forceinline__ void wgmma_rs_n256(float (&d)[4][32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n .reg .pred p;\n setp.eq.u32 p, 1, 1;\n"
        " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[0][4]), "+f"(d[0][5]),
          "+f"(d[0][6]), "+f"(d[0][7]), "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[0][10]), "+f"(d[0][11]),
          "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[0][14]), "+f"(d[0][15]), "+f"(d[0][16]), "+f"(d[0][17]),
          "+f"(d[0][18]), "+f"(d[0][19]), "+f"(d[0][20]), "+f"(d[0][21]), "+f"(d[0][22]), "+f"(d[0][23]),
          "+f"(d[0][24]), "+f"(d[0][25]), "+f"(d[0][26]), "+f"(d[0][27]), "+f"(d[0][28]), "+f"(d[0][29]),
          "+f"(d[0][30]), "+f"(d[0][31]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
          "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[1][6]), "+f"(d[1][7]), "+f"(d[1][8]), "+f"(d[1][9]),
          "+f"(d[1][10]), "+f"(d[1][11]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[1][14]), "+f"(d[1][15]),
          "+f"(d[1][16]), "+f"(d[1][17]), "+f"(d[1][18]), "+f"(d[1][19]), "+f"(d[1][20]), "+f"(d[1][21]),
          "+f"(d[1][22]), "+f"(d[1][23]), "+f"(d[1][24]), "+f"(d[1][25]), "+f"(d[1][26]), "+f"(d[1][27]),
          "+f"(d[1][28]), "+f"(d[1][29]), "+f"(d[1][30]), "+f"(d[1][31]), "+f"(d[2][0]), "+f"(d[2][1]),
          "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[2][4]), "+f"(d[2][5]), "+f"(d[2][6]), "+f"(d[2][7]),
          "+f"(d[2][8]), "+f"(d[2][9]), "+f"(d[2][10]), "+f"(d[2][11]), "+f"(d[2][12]), "+f"(d[2][13]),
          "+f"(d[2][14]), "+f"(d[2][15]), "+f"(d[2][16]), "+f"(d[2][17]), "+f"(d[2][18]), "+f"(d[2][19]),
          "+f"(d[2][20]), "+f"(d[2][21]), "+f"(d[2][22]), "+f"(d[2][23]), "+f"(d[2][24]), "+f"(d[2][25]),
          "+f"(d[2][26]), "+f"(d[2][27]), "+f"(d[2][28]), "+f"(d[2][29]), "+f"(d[2][30]), "+f"(d[2][31]),
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[3][4]), "+f"(d[3][5]),
          "+f"(d[3][6]), "+f"(d[3][7]), "+f"(d[3][8]), "+f"(d[3][9]), "+f"(d[3][10]), "+f"(d[3][11]),
          "+f"(d[3][12]), "+f"(d[3][13]), "+f"(d[3][14]), "+f"(d[3][15]), "+f"(d[3][16]), "+f"(d[3][17]),
          "+f"(d[3][18]), "+f"(d[3][19]), "+f"(d[3][20]), "+f"(d[3][21]), "+f"(d[3][22]), "+f"(d[3][23]),
          "+f"(d[3][24]), "+f"(d[3][25]), "+f"(d[3][26]), "+f"(d[3][27]), "+f"(d[3][28]), "+f"(d[3][29]),
          "+f"(d[3][30]), "+f"(d[3][31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// S = Q·Kᵀ for one key block: D/16 k-steps, each reading 32 B further along the current 64-column panel.
template <int D, int BN>
__device__ __forceinline__ void scores(float (&s)[BN / 2], uint32_t q_tile, uint32_t k_tile) {
    constexpr uint32_t PANEL_Q = BM * 128, PANEL_K = BN * 128;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint64_t da = smem_desc(q_tile + (kk / 4) * PANEL_Q) + 2 * (kk % 4);
        const uint64_t db = smem_desc(k_tile + (kk / 4) * PANEL_K) + 2 * (kk % 4);
        if constexpr (BN == 128)
            wgmma_ss_n128(s, da, db, kk > 0 ? 1u : 0u);
        else
            wgmma_ss_n64(s, da, db, kk > 0 ? 1u : 0u);
    }
}


// Named barriers 1 and 2 order the two consumer warpgroups' tensor-core work: a warpgroup issues its
// products only after the other has issued its own, so one's softmax overlaps the other's products.
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// Masks the ragged and causal edges of one S block (only blocks that reach an edge pay for it).
template <int BN>
__device__ __forceinline__ void mask_block(float (&s)[BN / 2], int k0, int S, int causal, int wg_row, int row, int lane) {
    if (k0 + BN > S || (causal && k0 + BN - 1 > wg_row)) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = k0 + 8 * j + 2 * (lane & 3) + e;
                    if (col >= S || (causal && col > row + 8 * h)) s[4 * j + 2 * h + e] = -INFINITY;
                }
    }
}

// Online softmax in base 2: turns S into P in place, updates the row maxima m and this thread's share of
// the row sums l, and returns the factors by which O must be rescaled.
template <int BN>
__device__ __forceinline__ void softmax_block(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&correction)[2],
                                              float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        const float m_new = fmaxf(m[h], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;   // a row with nothing visible yet
        correction[h] = exp2_approx(m[h] - m_use);
        m[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float p = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -m_use));
                s[4 * j + 2 * h + e] = p;
                sum += p;
            }
        l[h] = l[h] * correction[h] + sum;
    }
}

template <int BN>
__device__ __forceinline__ void to_fragments(uint32_t (&p)[BN / 16][4], const float (&s)[BN / 2]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        p[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
        p[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        p[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        p[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

// O += P·V for one key block: P from registers, V as MN-major 64-column panels. One wgmma per k16 step spans all
// DP panels (n = 64 * DP): the descriptor's leading byte offset is the panel stride, the stride byte offset the
// 1024 B between 8-key atoms. At d256 this issues 4 wgmmas per 64 keys instead of 16 (ncu, fourteenth session:
// ours had issued 2.7x cuDNN's wgmma instructions, each with its own descriptor arithmetic).
template <int BN, int DP>
__device__ __forceinline__ void accumulate_pv(float (&o)[DP][32], const uint32_t (&p)[BN / 16][4], uint32_t v_tile) {
    constexpr uint64_t LBO_FIELD = (uint64_t)0x3FFF << 16, PANEL_LBO = (uint64_t)((BN * 128) >> 4) << 16;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        const uint64_t db = (smem_desc(v_tile + kk * 16 * 128) & ~LBO_FIELD) | PANEL_LBO;
        if constexpr (DP == 4)
            wgmma_rs_n256(o, p[kk], db);
        else if constexpr (DP == 2)
            wgmma_rs_n128(o, p[kk], db);
        else
            wgmma_rs_n64(o[0], p[kk], db, 1u);
    }
}

template <int D_>
__global__ void __launch_bounds__(THREADS, 1)
attention_fwd_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                     const __grid_constant__ CUtensorMap tmap_v, __nv_bfloat16* __restrict__ O,
                     float* __restrict__ LSE, int S, int causal, float scale_log2) {
    using C = Config<D_>;
    constexpr int BN = C::BN, DP = C::DP, STAGES = C::STAGES;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t smem_q = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t smem_k = smem_q + C::Q_BYTES;                 // STAGES K blocks
    const uint32_t smem_v = smem_k + STAGES * C::KV_BYTES;       // STAGES V blocks
    const uint32_t full_q = smem_v + STAGES * C::KV_BYTES;
    const uint32_t full_k = full_q + 8;                          // STAGES barriers each
    const uint32_t full_v = full_k + 8 * STAGES;
    const uint32_t empty_k = full_v + 8 * STAGES;
    const uint32_t empty_v = empty_k + 8 * STAGES;

    const int q_blocks = (S + BM - 1) / BM, k_blocks = (S + BN - 1) / BN;
    const int qb = causal ? q_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int bh = blockIdx.y;
    const int q0 = qb * BM;
    const int k_end = causal ? min(k_blocks, (q0 + BM - 1) / BN + 1) : k_blocks;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_q)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_k)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_v)) : "memory");
        mbar_init(full_q, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_k + 8 * s, 1);
            mbar_init(full_v + 8 * s, 1);
            mbar_init(empty_k + 8 * s, CONSUMERS * 4);
            mbar_init(empty_v + 8 * s, CONSUMERS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer: K and V rings with their own slots, so K runs ahead of V ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(full_q, C::Q_BYTES);
            for (int p = 0; p < DP; ++p) tma_load_3d(smem_q + p * C::PANEL_Q, &tmap_q, full_q, 64 * p, q0, bh);
            for (int kb = 0; kb < k_end; ++kb) {
                const int s = kb % STAGES;
                const uint32_t phase = (kb / STAGES) & 1;
                mbar_wait(empty_k + 8 * s, phase ^ 1);               // fresh barriers pass parity 1 at once
                mbar_arrive_expect_tx(full_k + 8 * s, C::KV_BYTES);
                for (int p = 0; p < DP; ++p)
                    tma_load_3d(smem_k + s * C::KV_BYTES + p * C::PANEL_KV, &tmap_k, full_k + 8 * s, 64 * p, kb * BN, bh);
                mbar_wait(empty_v + 8 * s, phase ^ 1);
                mbar_arrive_expect_tx(full_v + 8 * s, C::KV_BYTES);
                for (int p = 0; p < DP; ++p)
                    tma_load_3d(smem_v + s * C::KV_BYTES + p * C::PANEL_KV, &tmap_v, full_v + 8 * s, 64 * p, kb * BN, bh);
            }
        }
        return;
    }

    // ---------------- consumers ----------------
    // Block j's Q·Kᵀ is issued together with block j-1's P·V, and block j's softmax runs while that P·V
    // is still on the tensor cores (FlashAttention-3's intra-warpgroup overlap).
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int cw = wg - 1;
    const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
    const int wg_row = q0 + cw * 64;                    // first query row of this warpgroup
    const int row = wg_row + warp * 16 + lane / 4;      // this thread's rows: row and row + 8
    const uint32_t q_tile = smem_q + cw * 64 * 128;
    // Key blocks with a row of this warpgroup below them; later ones (causal) are only released.
    const int wg_end = causal ? min(k_end, (wg_row + 63) / BN + 1) : k_end;

    // Accumulator layout of m64nNk16: element 4j + 2h + e is row (16 warp + lane/4 + 8h), column 8j + 2(lane%4) + e.
    float o[DP][32];
#pragma unroll
    for (int p = 0; p < DP; ++p)
#pragma unroll
        for (int i = 0; i < 32; ++i) o[p][i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY};                // running row maxima of S·scale·log2(e)
    float l[2] = {0.f, 0.f};                            // this thread's share of the running row sums
    float correction[2];
    float s_acc[C::S_REGS];
    uint32_t p_frag[BN / 16][4];
    auto release = [&](uint32_t empty, int kb) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * (kb % STAGES));
    };
    auto phase_of = [](int kb) { return (uint32_t)((kb / STAGES) & 1); };

    constexpr bool PINGPONG = BN == BM;                 // then both warpgroups walk the same key blocks
    if (PINGPONG && cw == 1) named_arrive(1);          // warpgroup 0 goes first

    mbar_wait(full_q, 0);
    // block 0: scores and softmax
    mbar_wait(full_k, 0);
    wgmma_fence();
    scores<C::D, BN>(s_acc, q_tile, smem_k);
    wgmma_commit();
    wgmma_wait0();
    pin(s_acc);
    release(empty_k, 0);
    mask_block<BN>(s_acc, 0, S, causal, wg_row, row, lane);
    softmax_block<BN>(s_acc, m, l, correction, scale_log2);
    to_fragments<BN>(p_frag, s_acc);

    for (int kb = 1; kb < wg_end; ++kb) {
        const int s = kb % STAGES, prev = (kb - 1) % STAGES;
        mbar_wait(full_k + 8 * s, phase_of(kb));
        mbar_wait(full_v + 8 * prev, phase_of(kb - 1));
        pin(p_frag);
#pragma unroll
        for (int p = 0; p < DP; ++p) pin(o[p]);
        if (PINGPONG) named_sync(1 + cw);
        wgmma_fence();
        scores<C::D, BN>(s_acc, q_tile, smem_k + s * C::KV_BYTES);
        wgmma_commit();
        accumulate_pv<BN, DP>(o, p_frag, smem_v + prev * C::KV_BYTES);
        wgmma_commit();
        if (PINGPONG) named_arrive(2 - cw);
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");   // the scores; P·V may still run
        pin(s_acc);
        release(empty_k, kb);
        mask_block<BN>(s_acc, kb * BN, S, causal, wg_row, row, lane);
        softmax_block<BN>(s_acc, m, l, correction, scale_log2);
        wgmma_wait0();
#pragma unroll
        for (int p = 0; p < DP; ++p) pin(o[p]);
        release(empty_v, kb - 1);
#pragma unroll
        for (int p = 0; p < DP; ++p)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    o[p][4 * j + 2 * h] *= correction[h];
                    o[p][4 * j + 2 * h + 1] *= correction[h];
                }
        to_fragments<BN>(p_frag, s_acc);
    }
    if (PINGPONG && cw == 0) named_sync(1);           // the other warpgroup's last arrival
    // the last block's P·V
    mbar_wait(full_v + 8 * ((wg_end - 1) % STAGES), phase_of(wg_end - 1));
    pin(p_frag);
#pragma unroll
    for (int p = 0; p < DP; ++p) pin(o[p]);
    wgmma_fence();
    accumulate_pv<BN, DP>(o, p_frag, smem_v + ((wg_end - 1) % STAGES) * C::KV_BYTES);
    wgmma_commit();
    wgmma_wait0();
#pragma unroll
    for (int p = 0; p < DP; ++p) pin(o[p]);
    release(empty_v, wg_end - 1);
    // Blocks wholly above this warpgroup's rows (causal): their slots are released once filled, so that
    // arrivals stay in step with the ring's phases.
    for (int kb = wg_end; kb < k_end; ++kb) {
        mbar_wait(full_k + 8 * (kb % STAGES), phase_of(kb));
        release(empty_k, kb);
        mbar_wait(full_v + 8 * (kb % STAGES), phase_of(kb));
        release(empty_v, kb);
    }

    // ---------------- epilogue ----------------
    float inv[2], total[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        total[h] = l[h];
        total[h] += __shfl_xor_sync(0xffffffff, total[h], 1);
        total[h] += __shfl_xor_sync(0xffffffff, total[h], 2);
        inv[h] = total[h] > 0.f ? 1.f / total[h] : 0.f;
    }
#pragma unroll
    for (int p = 0; p < DP; ++p) {
#pragma unroll
        for (int i = 0; i < 32; ++i) o[p][i] *= inv[(i >> 1) & 1];
        uint4 piece[2][2];
        pack_pieces(o[p], piece, lane & 3);
        store_pieces<1>(O + (size_t)bh * S * C::D, piece, row, 64 * p + 8 * (lane & 3), S, C::D, 0, 1);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
        if (row + 8 * h < S && (lane & 3) == 0) LSE[(size_t)bh * S + row + 8 * h] = (m[h] + log2f(total[h])) * LN2;
}

// [B*H, S, D] bf16 tensor, box {64 columns, rows, 1 head}, 128B swizzle, out-of-bounds reads as zero.
bool encode(CUtensorMap* map, const void* ptr, int heads, int S, int D, int box_rows) {
    const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)S, (cuuint64_t)heads};
    const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)S * D * 2};
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D>
cudaError_t launch(const void* Q, const void* K, const void* V, __nv_bfloat16* O, float* LSE, int heads, int S,
                   int causal, float scale, cudaStream_t stream) {
    using C = Config<D>;
    CUtensorMap tmap_q, tmap_k, tmap_v;
    if (!encode(&tmap_q, Q, heads, S, D, BM) || !encode(&tmap_k, K, heads, S, D, C::BN) ||
        !encode(&tmap_v, V, heads, S, D, C::BN))
        return cudaErrorInvalidValue;
    cudaError_t err =
        cudaFuncSetAttribute(attention_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM);
    if (err != cudaSuccess) return err;
    const dim3 grid((S + BM - 1) / BM, heads);
    attention_fwd_kernel<D><<<grid, THREADS, C::SMEM, stream>>>(tmap_q, tmap_k, tmap_v, O, LSE, S, causal,
                                                                scale * LOG2E);
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t ptxbench_attention_fwd(const __nv_bfloat16* Q, const __nv_bfloat16* K,
                                              const __nv_bfloat16* V, __nv_bfloat16* O, float* LSE, int B, int H,
                                              int S, int D, int causal, float scale, void* workspace,
                                              size_t workspace_bytes, cudaStream_t stream) {
    (void)workspace;
    (void)workspace_bytes;
    const long long heads = (long long)B * H;
    if (B <= 0 || H <= 0 || S <= 0 || heads > 65535 || !Q || !K || !V || !O || !LSE ||
        ((reinterpret_cast<uintptr_t>(Q) | reinterpret_cast<uintptr_t>(K) | reinterpret_cast<uintptr_t>(V)) & 15) ||
        (reinterpret_cast<uintptr_t>(O) & 15))   // O is written in 16 B row pieces
        return cudaErrorInvalidValue;
    switch (D) {
        case 64: return launch<64>(Q, K, V, O, LSE, (int)heads, S, causal, scale, stream);
        case 96: return launch<96>(Q, K, V, O, LSE, (int)heads, S, causal, scale, stream);
        case 128: return launch<128>(Q, K, V, O, LSE, (int)heads, S, causal, scale, stream);
        case 256: return launch<256>(Q, K, V, O, LSE, (int)heads, S, causal, scale, stream);
        default: return cudaErrorInvalidValue;
    }
}
