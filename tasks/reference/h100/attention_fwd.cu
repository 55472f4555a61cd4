// Reference Hopper (sm_90a) attention forward: O = softmax(Q·Kᵀ·scale [+ causal mask])·V and the
// natural-log LSE of every row, Q, K, V, O as [B, H, S, D] bf16, LSE [B, H, S] fp32.
//
// Design (FlashAttention-3 style; a tile is 64 query rows per consumer warpgroup of one head: 192 at D 64 (128 where
// causal and 192 would pad the rows by a twelfth more), else 128)
//  * Two schedules of one kernel (the PERSISTENT flag; the launcher picks): one CTA per tile, or one CTA per
//    SM taking tiles from a counter in the workspace (a CTA claims its next tile as it loads the current one's
//    last key block), the next tile's Q loaded (a second Q buffer) and its slot read while the current one finishes,
//    so that tiles with few key blocks do not each pay their own start and end.
//  * 1 + CONSUMERS warpgroups (3 consumers at D 64, 2 above: 512 or 384 threads), warp-specialised:
//      - warpgroup 0: producer (setmaxnreg.dec 24). One thread issues TMA loads: each tile's Q once,
//        then the K and V blocks into a ring of STAGES slots (K and V on separate barriers, so that Q·Kᵀ
//        starts before V has landed).
//      - warpgroups 1 .. CONSUMERS: consumers (setmaxnreg.inc 240, 160 with three), 64 query rows each.
//        With 128-key blocks they take the tensor cores in turn (named barriers). Per key block:
//        S = Q·Kᵀ with wgmma (A = Q, B = K, both K-major in shared memory), masking on the ragged and
//        causal edges, online softmax in base 2 in registers, then O += P·V with wgmma taking P from
//        registers (the fp32 accumulator layout of S, packed to bf16 pairs, is the A-fragment layout)
//        and V from shared memory as an MN-major operand (trans-b).
//  * Shared memory: every tile is stored as 64-column panels ([rows x 64] bf16 = rows x 128 B) with the
//    128B swizzle, written by 3D TMA boxes {64, rows, 1} over the tensor {D, S, B*H}; TMA zero-fills rows
//    past S and columns past D (D = 96 uses two panels, the second half empty).
//    Layout (Smem): [Q: QBUF x DP panels x BM rows][K ring: STAGES x DP x BN rows][V ring: same][mbarriers].
//  * Descriptors: K-major operands (Q, K) step 32 B along a panel per k16 and jump panels every 4 steps;
//    8-row atoms are 1024 B apart (SBO). V as MN-major: a k16 step covers 16 key rows (2048 B); one wgmma
//    of n = 64 * DP reads every panel, the panels a leading byte offset apart; 8-key atoms are 1024 B apart.
//  * Causal: tiles run from the last (longest) query block of a head to the first; key blocks past the diagonal
//    are not loaded; a consumer warpgroup whose rows are all above a block skips its arithmetic.
//  * Epilogue: O scaled by 1/l, rounded to bf16 and transposed within each quad of lanes so that every lane
//    stores 16 B row pieces (pack_pieces); LSE = (m + log2 l)·ln 2.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// Consumer warpgroups, 64 query rows each. d64 is bound by the softmax, not the tensor cores: a third
// warpgroup gives each one's exponentials two others' products to hide behind (the launcher may take two).
template <int D_, bool PERSISTENT_, int CONSUMERS_ = (D_ <= 64 ? 3 : 2)>
struct Config {
    static constexpr int D = D_;
    static constexpr bool PERSISTENT = PERSISTENT_;
    static constexpr int CONSUMERS = CONSUMERS_;
    static constexpr int BM = 64 * CONSUMERS;             // query rows per tile
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    static constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;   // setmaxnreg: 24 for the producer
    static constexpr int DP = (D + 63) / 64;              // 64-column panels
    static constexpr int BN = D > 128 ? 64 : 128;         // keys per block
    static constexpr int STAGES = D <= 64 ? 4 : 2;
    static constexpr int S_REGS = BN / 2;                 // fp32 score accumulators per thread
    static constexpr uint32_t PANEL_Q = BM * 128;
    static constexpr uint32_t PANEL_KV = BN * 128;
    static constexpr uint32_t Q_BYTES = DP * PANEL_Q;
    static constexpr uint32_t KV_BYTES = DP * PANEL_KV;   // one K or V block
    static constexpr size_t smem(int qbuf) { return 1024 + qbuf * Q_BYTES + 2 * STAGES * KV_BYTES + (2 * qbuf + 4 * STAGES) * 8; }
    // Q tiles in flight: a persistent CTA loads the next tile's Q early where two fit.
    static constexpr int QBUF = PERSISTENT && smem(2) <= 227 * 1024 ? 2 : 1;
    static constexpr size_t SMEM = smem(QBUF);
    // Whether the key blocks that need no mask get a loop of their own (see the consumers' loops).
    static constexpr bool SPLIT_MASK = D > 64;
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
template <int D, int BM, int BN>
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


// Named barriers 1 .. N order the N consumer warpgroups' tensor-core work round-robin: warpgroup c issues its products
// once every other has issued its own since c's last turn (barrier 1 + c counts c and one arrival from each other), so
// one's softmax overlaps the others' products.
template <int N>
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(128 * N) : "memory"); }
template <int N>
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "n"(128 * N) : "memory"); }

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
        // Four partial maxima and sums: one chain of BN / 4 dependent steps each was the softmax's latency.
        float part[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) part[i] = fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]);
#pragma unroll
        for (int j = 4; j < BN / 8; ++j) part[j % 4] = fmaxf(part[j % 4], fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        float mx = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        const float m_new = fmaxf(m[h], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;   // a row with nothing visible yet
        correction[h] = exp2_approx(m[h] - m_use);
        m[h] = m_new;
#pragma unroll
        for (int i = 0; i < 4; ++i) part[i] = 0.f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float p = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -m_use));
                s[4 * j + 2 * h + e] = p;
                part[2 * (j % 2) + e] += p;
            }
        l[h] = l[h] * correction[h] + ((part[0] + part[1]) + (part[2] + part[3]));
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

template <bool B>
struct Flag {
    static constexpr bool value = B;
};

// Shared-memory layout from a 1024 B aligned base: [Q: QBUF tiles][K ring][V ring][mbarriers].
struct Smem {
    uint32_t q, k, v;                                    // Q tiles, then STAGES K blocks, then STAGES V blocks
    uint32_t full_q, empty_q, full_k, full_v, empty_k, empty_v;   // QBUF or STAGES 8 B barriers each
};

template <class C>
__device__ __forceinline__ Smem layout(uint32_t base) {
    Smem m;
    m.q = base;
    m.k = m.q + C::QBUF * C::Q_BYTES;
    m.v = m.k + C::STAGES * C::KV_BYTES;
    m.full_q = m.v + C::STAGES * C::KV_BYTES;
    m.empty_q = m.full_q + 8 * C::QBUF;
    m.full_k = m.empty_q + 8 * C::QBUF;
    m.full_v = m.full_k + 8 * C::STAGES;
    m.empty_k = m.full_v + 8 * C::STAGES;
    m.empty_v = m.empty_k + 8 * C::STAGES;
    return m;
}

// A persistent CTA's tile slots in the workspace: [tile counter][QBUF slots per CTA], each the tile that the consumers
// take next from that Q buffer (-1: none left). Written before the Q buffer's full barrier is armed, read after its
// wait. Global, not shared, memory: compute-sanitizer's racecheck does not follow the mbarrier ordering of plain
// shared-memory accesses and reported every hand-over as a race.
template <class C>
__device__ __forceinline__ int* slot_of(int* work, int b) { return work + 1 + C::QBUF * blockIdx.x + b; }
__device__ __forceinline__ void put_slot(int* slot, int t) {
    asm volatile("st.global.u32 [%0], %1;" ::"l"(slot), "r"(t) : "memory");
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1)
attention_fwd_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                     const __grid_constant__ CUtensorMap tmap_v, __nv_bfloat16* __restrict__ O,
                     float* __restrict__ LSE, int* __restrict__ work, int heads, int S, int causal,
                     float scale_log2) {
    constexpr int BM = C::BM, BN = C::BN, DP = C::DP, STAGES = C::STAGES, CONSUMERS = C::CONSUMERS;
    extern __shared__ uint8_t smem_raw[];
    constexpr int QBUF = C::QBUF;
    Smem sm = layout<C>(((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u);

    const int q_blocks = (S + BM - 1) / BM, k_blocks = (S + BN - 1) / BN;
    const int tiles = q_blocks * heads;
    const int wg = threadIdx.x / 128;
    // Tile t of a persistent CTA: head t / q_blocks, query block t % q_blocks; otherwise the CTA's own tile, head
    // blockIdx.y, query block blockIdx.x (read from the block index again where needed, not held in registers).
    // Causal: query blocks from the last, longest, to the first.
    auto tile_of = [&](int t, int& q0, int& bh, int& k_end) {
        const int i = C::PERSISTENT ? t % q_blocks : (int)blockIdx.x;
        const int qb = causal ? q_blocks - 1 - i : i;
        bh = C::PERSISTENT ? t / q_blocks : (int)blockIdx.y;
        q0 = qb * BM;
        k_end = causal ? min(k_blocks, (q0 + BM - 1) / BN + 1) : k_blocks;
    };
    // A persistent CTA's tiles each take a whole number of turns of the K and V rings (the producer passes the
    // slots past k_end empty): every tile then starts at slot 0, a block's slot is kb % STAGES whatever tile came
    // before, and the consumers' wgmma descriptors stay on the uniform datapath (a slot that depends on earlier
    // tiles' lengths, read from shared memory, is per-thread to the compiler).
    auto padded = [](int k_end) { return C::PERSISTENT ? (k_end + C::STAGES - 1) / C::STAGES * C::STAGES : k_end; };

    if (threadIdx.x == 0) {
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_q)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_k)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_v)) : "memory");
        for (int b = 0; b < QBUF; ++b) {
            mbar_init(sm.full_q + 8 * b, 1);
            mbar_init(sm.empty_q + 8 * b, CONSUMERS * 4);
        }
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(sm.full_k + 8 * s, 1);
            mbar_init(sm.full_v + 8 * s, 1);
            mbar_init(sm.empty_k + 8 * s, CONSUMERS * 4);
            mbar_init(sm.empty_v + 8 * s, CONSUMERS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer: K and V rings with their own slots, so K runs ahead of V ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (threadIdx.x == 0) {
            int it = 0, n = 0;
            for (int t = C::PERSISTENT ? (int)blockIdx.x : 0; t < tiles; ++n) {
                const uint32_t qs = 8 * (n % QBUF);
                mbar_wait(sm.empty_q + qs, ((n / QBUF) & 1) ^ 1);    // fresh barriers pass parity 1 at once
                if (C::PERSISTENT) put_slot(slot_of<C>(work, qs / 8), t);
                int q0, bh, k_end;
                tile_of(t, q0, bh, k_end);
                mbar_arrive_expect_tx(sm.full_q + qs, C::Q_BYTES);
                for (int p = 0; p < DP; ++p)
                    tma_load_3d(sm.q + (qs / 8) * C::Q_BYTES + p * C::PANEL_Q, &tmap_q, sm.full_q + qs, 64 * p, q0, bh);
                int next = tiles;
                for (int kb = 0; kb < padded(k_end); ++kb, ++it) {   // past k_end: empty passes of the ring
                    // The next tile is claimed with the last block's loads: claimed earlier, a long causal tile's CTA
                    // would hold it while others ran dry.
                    if (C::PERSISTENT && kb == k_end - 1) next = (int)gridDim.x + atomicAdd(work, 1);
                    const int s = it % STAGES;
                    const uint32_t phase = (it / STAGES) & 1;
                    // One ring slot: K or V block kb, or past k_end an arrival with nothing loaded.
                    auto fill = [&](uint32_t empty, uint32_t full, uint32_t ring, const CUtensorMap* map) {
                        mbar_wait(empty + 8 * s, phase ^ 1);
                        if (kb >= k_end) {
                            mbar_arrive(full + 8 * s);
                            return;
                        }
                        mbar_arrive_expect_tx(full + 8 * s, C::KV_BYTES);
                        for (int p = 0; p < DP; ++p)
                            tma_load_3d(ring + s * C::KV_BYTES + p * C::PANEL_KV, map, full + 8 * s, 64 * p, kb * BN, bh);
                    };
                    fill(sm.empty_k, sm.full_k, sm.k, &tmap_k);
                    fill(sm.empty_v, sm.full_v, sm.v, &tmap_v);
                }
                t = next;
            }
            if (C::PERSISTENT) {                                  // no tile left: -1 in the next slot
                const uint32_t qs = 8 * (n % QBUF);
                mbar_wait(sm.empty_q + qs, ((n / QBUF) & 1) ^ 1);
                put_slot(slot_of<C>(work, qs / 8), -1);
                mbar_arrive(sm.full_q + qs);
            }
        }
        return;
    }

    // ---------------- consumers ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(C::CONSUMER_REGS));
    {
        // A fresh copy of the base, opaque to the compiler: with the producer's uses of the same value (its loop over
        // tiles) in view, ptxas kept it in a per-thread register, and every wgmma descriptor of the consumers' loop
        // was computed there and moved to the uniform datapath one R2UR at a time (nvdisasm: 72 R2UR per d256 block
        // against 34; 3-6% slower at d256 on the H200).
        uint32_t base;
        asm volatile("mov.b32 %0, %1;" : "=r"(base) : "r"(sm.q));
        sm = layout<C>(base);
    }
    const int cw = wg - 1;
    const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
    auto release = [&](uint32_t bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
    };
    // Round-robin where the key blocks are 128 wide: one turn per key block from the second, a warpgroup's products
    // issued within its turn. Every warpgroup takes k_end - 1 turns a tile, empty ones for the blocks wholly above its
    // rows (causal d64: BM 192 over 128-key blocks). Warpgroup 0 goes first, so each later one has already arrived for
    // it (and the third for the second).
    constexpr bool PINGPONG = BN == 128, SKIPS = BM > BN;
    auto take_turn = [&] {
        if (PINGPONG) named_sync<CONSUMERS>(1 + cw);
    };
    auto pass_turn = [&] {
        if (PINGPONG)
            for (int c = 0; c < CONSUMERS; ++c)
                if (c != cw) named_arrive<CONSUMERS>(1 + c);
    };
    if (PINGPONG)
        for (int c = 0; c < cw; ++c) named_arrive<CONSUMERS>(1 + c);

    // Tile n's Q buffer full, then (persistent) its slot read. With two Q buffers the next tile's is read before the
    // current tile's epilogue, so the load's latency hides behind it (d64 S 512: 5% faster on an H100). Not earlier:
    // the producer loads the next Q only after this tile's last ring slots, which this warpgroup still has to pass.
    auto claim = [&](int n) {
        mbar_wait(sm.full_q + 8 * (n % QBUF), (n / QBUF) & 1);
        int t = 0;
        if (C::PERSISTENT)
            asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(t) : "l"(slot_of<C>(work, n % QBUF)) : "memory");
        return t;
    };
    constexpr bool EARLY = C::PERSISTENT && QBUF == 2;
    int claimed = EARLY ? claim(0) : 0;
    int ring = 0;                                       // ring position of the next tile's first block
    for (int n = 0; C::PERSISTENT || n == 0; ++n) {
        const uint32_t qs = 8 * (n % QBUF);
        if (!EARLY) claimed = claim(n);
        int t = 0;
        if (C::PERSISTENT) {
            t = (int)__reduce_or_sync(0xffffffffu, (unsigned)claimed);   // the same in every lane: now uniform to ptxas
            if (t < 0) break;
        }
        const uint32_t q_tile = sm.q + (qs / 8) * C::Q_BYTES + cw * 64 * 128;
        int q0, bh, k_end;
        tile_of(t, q0, bh, k_end);
        const int wg_row = q0 + cw * 64;                    // first query row of this warpgroup
        const int row = wg_row + warp * 16 + lane / 4;      // this thread's rows: row and row + 8
        // Key blocks with a row of this warpgroup on or below them: fewer than k_end only where a tile is taller than a
        // key block (causal d64 and d256).
        const int wg_end = causal && SKIPS ? min(k_end, (wg_row + 63) / BN + 1) : k_end;
        const int it0 = C::PERSISTENT ? ring : 0;           // a multiple of STAGES
        auto slot = [](int kb) { return 8 * (kb % STAGES); };
        auto phase_of = [&](int kb) { return (uint32_t)(((it0 + kb) / STAGES) & 1); };

        float o[DP][32];
#pragma unroll
        for (int p = 0; p < DP; ++p)
#pragma unroll
            for (int i = 0; i < 32; ++i) o[p][i] = 0.f;
        float m[2] = {-INFINITY, -INFINITY};
        float l[2] = {0.f, 0.f};
        float correction[2];
        float s_acc[C::S_REGS];
        uint32_t p_frag[BN / 16][4];

        mbar_wait(sm.full_k + slot(0), phase_of(0));
        wgmma_fence();
        scores<C::D, C::BM, BN>(s_acc, q_tile, sm.k + (slot(0) / 8) * C::KV_BYTES);
        wgmma_commit();
        wgmma_wait0();
        pin(s_acc);
        release(sm.empty_k + slot(0));
        mask_block<BN>(s_acc, 0, S, causal, wg_row, row, lane);
        softmax_block<BN>(s_acc, m, l, correction, scale_log2);
        to_fragments<BN>(p_frag, s_acc);

        // One key block: its Q·Kᵀ is issued together with the previous block's P·V; its softmax overlaps the other
        // warpgroup's products (ping-pong). ptxas places the wait for this warpgroup's own P·V above the exponentials;
        // holding it below them measured 3-5% slower (H200, sixteenth session).
        // Two copies of the loop where SPLIT_MASK: the mask's compares and selects, if-converted by the compiler, were
        // a quarter of every block's instructions, and only the blocks from mask_from on (the causal diagonal, the
        // ragged end) need them. At d64 one loop with the mask inline measured 2-3% faster: there the compares fill
        // the wait for the P·V products.
        auto step = [&](int kb, auto masked) {
            using MASKED = decltype(masked);
            mbar_wait(sm.full_k + slot(kb), phase_of(kb));
            mbar_wait(sm.full_v + slot(kb - 1), phase_of(kb - 1));
            pin(p_frag);
#pragma unroll
            for (int p = 0; p < DP; ++p) pin(o[p]);
            take_turn();
            wgmma_fence();
            scores<C::D, C::BM, BN>(s_acc, q_tile, sm.k + (slot(kb) / 8) * C::KV_BYTES);
            wgmma_commit();
            accumulate_pv<BN, DP>(o, p_frag, sm.v + (slot(kb - 1) / 8) * C::KV_BYTES);
            wgmma_commit();
            pass_turn();
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            pin(s_acc);
            release(sm.empty_k + slot(kb));
            if constexpr (MASKED::value) mask_block<BN>(s_acc, kb * BN, S, causal, wg_row, row, lane);
            softmax_block<BN>(s_acc, m, l, correction, scale_log2);
            wgmma_wait0();
#pragma unroll
            for (int p = 0; p < DP; ++p) pin(o[p]);
            release(sm.empty_v + slot(kb - 1));
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
        };
        // The first block to mask, at most wg_end (causal: the CTA's diagonal, where d256's second warpgroup masks
        // one block more than it needs). The unmasked loop counts from 1, so its descriptors stay uniform.
        const int mask_from =
            C::SPLIT_MASK ? max(1, min(causal ? q0 / BN : k_blocks, S % BN ? k_blocks - 1 : k_blocks)) : 1;
        for (int kb = 1; kb < mask_from; ++kb) step(kb, Flag<false>{});
        for (int kb = mask_from; kb < wg_end; ++kb) step(kb, Flag<true>{});
        release(sm.empty_q + qs);                                   // every score product of this tile has finished
        mbar_wait(sm.full_v + slot(wg_end - 1), phase_of(wg_end - 1));
        pin(p_frag);
#pragma unroll
        for (int p = 0; p < DP; ++p) pin(o[p]);
        wgmma_fence();
        accumulate_pv<BN, DP>(o, p_frag, sm.v + (slot(wg_end - 1) / 8) * C::KV_BYTES);
        wgmma_commit();
        wgmma_wait0();
#pragma unroll
        for (int p = 0; p < DP; ++p) pin(o[p]);
        release(sm.empty_v + slot(wg_end - 1));
        for (int kb = wg_end; kb < padded(k_end); ++kb) {   // blocks above this warpgroup's rows, then padding
            if (SKIPS && kb < k_end) {
                take_turn();
                pass_turn();
            }
            mbar_wait(sm.full_k + slot(kb), phase_of(kb));
            release(sm.empty_k + slot(kb));
            mbar_wait(sm.full_v + slot(kb), phase_of(kb));
            release(sm.empty_v + slot(kb));
        }
        ring += padded(k_end);
        if (EARLY) claimed = claim(n + 1);

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
    // Complete what the last turns left open: barrier 1 + c holds the last arrivals of the warpgroups after c, and
    // waits for one more from each warpgroup before c but the last. A warpgroup syncs before it arrives: arriving
    // first, the first warpgroup could arrive twice at the second's barrier before the second had synced its last
    // turn, complete that turn without it and deadlock all three (on the H200 at d64 causal b16-h48-s512: twice, within
    // 41 and within 2,010 launches; in this order none in 2,010 launches at each of the twelve d64 shapes).
    if (PINGPONG && cw < CONSUMERS - 1) {
        named_sync<CONSUMERS>(1 + cw);
        for (int c = cw + 1; c < CONSUMERS - 1; ++c) named_arrive<CONSUMERS>(1 + c);
    }
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

template <class C>
cudaError_t run(const CUtensorMap (&maps)[3], __nv_bfloat16* O, float* LSE, int* work, int heads, int S,
                int causal, float scale, dim3 grid, cudaStream_t stream) {
    cudaError_t err = cudaFuncSetAttribute(attention_fwd_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)C::SMEM);
    if (err != cudaSuccess) return err;
    if (C::PERSISTENT && (err = cudaMemsetAsync(work, 0, sizeof(int), stream)) != cudaSuccess) return err;
    attention_fwd_kernel<C><<<grid, C::THREADS, C::SMEM, stream>>>(maps[0], maps[1], maps[2], O, LSE, work, heads, S,
                                                                causal, scale * LOG2E);
    return cudaGetLastError();
}

// Persistent CTAs (one per SM, tiles handed out by a counter in the workspace) pay off where a tile has few key
// blocks to spread its own start and end over, and at D <= 128 at every length; at d256 (one Q buffer) one CTA per
// tile is faster from 17 key blocks up (measured on the H200: MEASUREMENTS.md, fifteenth and sixteenth sessions).
template <int D, int CONSUMERS>
cudaError_t launch(const void* Q, const void* K, const void* V, __nv_bfloat16* O, float* LSE, int heads, int S,
                   int causal, float scale, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    using One = Config<D, false, CONSUMERS>;
    using Persistent = Config<D, true, CONSUMERS>;
    constexpr int BM = One::BM, BN = One::BN;
    CUtensorMap maps[3];
    if (!encode(&maps[0], Q, heads, S, D, BM) || !encode(&maps[1], K, heads, S, D, BN) ||
        !encode(&maps[2], V, heads, S, D, BN))
        return cudaErrorInvalidValue;
    const long long tiles = (long long)((S + BM - 1) / BM) * heads;
    int device = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    const bool persistent = (D <= 128 || (S + BN - 1) / BN <= 16) && tiles > sms && workspace &&
                            workspace_bytes >= (1 + (size_t)Persistent::QBUF * sms) * sizeof(int) &&
                            (reinterpret_cast<uintptr_t>(workspace) & 3) == 0;
    if (persistent)
        return run<Persistent>(maps, O, LSE, static_cast<int*>(workspace), heads, S, causal, scale, dim3(sms), stream);
    return run<One>(maps, O, LSE, nullptr, heads, S, causal, scale, dim3((S + BM - 1) / BM, heads), stream);
}

// Causal d64 takes two consumer warpgroups (128-row tiles) where three (192 rows) would pad the rows by a twelfth
// more: S 512 and 1000 of the tasks' lengths (measured on an H100, thirty-second session: causal S 1000 4% faster;
// without the mask the two were 5-6% slower at S 512 and 1000, so full keeps three).
template <int D>
cudaError_t launch_d(const void* Q, const void* K, const void* V, __nv_bfloat16* O, float* LSE, int heads, int S,
                     int causal, float scale, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    constexpr int TILE = 64 * Config<D, false>::CONSUMERS;
    const long long padded = (long long)(S + TILE - 1) / TILE * TILE, padded2 = (S + 127) / 128 * 128;
    if (TILE > 128 && causal && 12 * padded > 13 * padded2)
        return launch<D, 2>(Q, K, V, O, LSE, heads, S, causal, scale, workspace, workspace_bytes, stream);
    return launch<D, Config<D, false>::CONSUMERS>(Q, K, V, O, LSE, heads, S, causal, scale, workspace, workspace_bytes,
                                                  stream);
}

}  // namespace

extern "C" cudaError_t ptxbench_attention_fwd(const __nv_bfloat16* Q, const __nv_bfloat16* K,
                                              const __nv_bfloat16* V, __nv_bfloat16* O, float* LSE, int B, int H,
                                              int S, int D, int causal, float scale, void* workspace,
                                              size_t workspace_bytes, cudaStream_t stream) {
    const long long heads = (long long)B * H;
    if (B <= 0 || H <= 0 || S <= 0 || heads > 65535 || !Q || !K || !V || !O || !LSE ||
        ((reinterpret_cast<uintptr_t>(Q) | reinterpret_cast<uintptr_t>(K) | reinterpret_cast<uintptr_t>(V)) & 15) ||
        (reinterpret_cast<uintptr_t>(O) & 15))   // O is written in 16 B row pieces
        return cudaErrorInvalidValue;
    switch (D) {
        case 64: return launch_d<64>(Q, K, V, O, LSE, (int)heads, S, causal, scale, workspace, workspace_bytes, stream);
        case 96: return launch_d<96>(Q, K, V, O, LSE, (int)heads, S, causal, scale, workspace, workspace_bytes, stream);
        case 128: return launch_d<128>(Q, K, V, O, LSE, (int)heads, S, causal, scale, workspace, workspace_bytes, stream);
        case 256: return launch_d<256>(Q, K, V, O, LSE, (int)heads, S, causal, scale, workspace, workspace_bytes, stream);
        default: return cudaErrorInvalidValue;
    }
}
