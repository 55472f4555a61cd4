// Reference Hopper (sm_90a) bf16 GEMM: C[M,N] = A[M,K] · B[N,K]^T, fp32 accumulation, bf16 output.
// Three kernels inside the one launcher. It prices plans in one rough cost model (SM clocks per k-step of a tile,
// reductions, launches, a DRAM floor; constants fitted on the H200 and H100 across every (N, K, M) of the task file)
// and runs the cheapest: the large-tile kernel or the wide-tile kernel (N > 256 only) or the BN = 128 kernel at either
// of its two tile heights over all of C, or a row split: the large kernel over a head of whole 128-row tiles (no
// split-K), then any kernel over the remaining rows as a GEMM of its own (A and C offset by the head). A ragged last
// wave of 128x256 tiles has three cures, all priced: the row split, the large kernel's own tail split (below), and the
// wide kernel's 256x160 tiles (e.g. M = 901-972 at N = 5376 takes the tail split, M = 769-972 at N = 5120 and
// K = 2048 one wave of wide tiles). The BN = 128 kernel wins outright where the 128x256 tiles are too few for the SMs:
// small M (e.g. M <= 93 at N = 7168).
//
// Large-tile kernel: persistent 128x256 tiles in grouped order, 1 TMA producer + 2 consumer warpgroups,
// wgmma.m64n256k16, a 4-stage mbarrier ring. A finished tile is rounded to bf16, transposed inside each quad of lanes
// into 16 B row pieces, held in registers, and stored a quarter under each of the next tile's first four k-steps, so
// that its stores run under tensor work and never fill the store queue at once (the 4 B stores of one burst had cost
// 5-8% at M 8192). When the tiles fill under half the SMs, split-K across a cluster per tile (the BN = 128 kernel's
// reduction below, the partial tile written into the ring, idle once the last wgmmas have read it; one launch, no
// workspace), or, where more slices than fit as clusters pay (clusters are placed whole inside a GPC: on an H100 39
// clusters of 3 fit, not 132 / 3 = 44; e.g. M = 232 at N = 5376, 42 tiles), split-K by a chain: slice q adds its
// partial tile to the running sum of slices 0..q-1 and passes it on, row block by row block, the last slice storing C
// (fixed order: deterministic; the running sum as fp32 bit halves in C and the workspace, a memset node zeroes the
// counters). A ragged last wave (e.g. M = 901-972 at N = 5376: 168 tiles, 132 + 36) is split in the same launch where
// the model prefers it: whole waves of whole tiles, then each remaining tile cut into S K-slices on S otherwise idle
// SMs (36 x 3); slices but the last store their fp32 accumulators in a slab of the workspace and count themselves in
// the tile's counter (a memset node zeroes the counters: the workspace is garbage on entry); the last slice waits for
// the count, adds the slabs in fixed order and stores the tile. Each CTA runs at most one slice, so nothing waits on a
// CTA that is itself waiting.
//
// Wide-tile kernel: persistent 256x160 tiles, whole tiles only (see its namespace), where they fill the SMs better
// than 128x256 ones: at N = 5120, M = 901-972 128 tiles in one wave (0.71-0.77x cuBLAS before, 0.99-1.04x with it on an
// H100), at the core shape 1440 tiles in 10.9 waves rather than 1792 in 13.6.
//
// BN = 128 kernel (every N <= 256, and N > 256 where the model prefers it):
//  * BN = 128 (wgmma.m64n128k16, 64 fp32 accumulators per thread). At N = 128 the large path's BN = 256 tile
//    wastes half of every wgmma and half of the B traffic; at N = 256 two 128-wide n-tiles double the tile
//    count, which is what the small-M shapes need anyway.
//  * Two tile heights, both with a TMA producer warpgroup:
//      cfg A: BM = 64,  1 consumer warpgroup, 256 threads, 8-stage ring of 24 KB;
//      cfg B: BM = 128, 2 consumer warpgroups, 384 threads, 5-stage ring of 32 KB.
//    The cost model picks between them: N = 128 mostly takes A (memory-bound, no reduction needed at M = 8192,
//    128 tiles), N = 256 at M >= ~900 takes B (twice the work per B byte loaded, 128 tiles at M = 8192).
//  * Split-K across the CTAs of a thread-block CLUSTER (cluster = the S <= 8 K-slices of one tile) with the
//    reduction through distributed shared memory: each CTA writes its fp32 partial tile into its own shared
//    memory (a separate 32/64 KB buffer, never the TMA ring, so no async-proxy fences are needed), then
//    barrier.cluster.arrive.release / wait.acquire; every CTA sums one 1/S share of the tile's float4 chunks over
//    all S CTAs' shared memory (mapa + ld.shared::cluster, fixed rank order: deterministic), rounds to bf16 into
//    registers, passes a second (exit) cluster barrier so no CTA leaves while a peer still reads its shared
//    memory, and only then stores C (so that barrier's release has no global stores to drain).
//    Why not the zero/atomic/last-arriver scheme: it needs a memset node (the workspace is garbage on entry),
//    counter space beyond 4*M*N, an inter-CTA release/acquire protocol on global memory, and M*N*S fp32 L2
//    reductions; the cluster scheme is one kernel, no workspace, no memset, no global atomics, no inter-CTA
//    spinning (a cluster is co-scheduled by hardware), no workspace-formula change. `workspace` is unused here.
//  * Work split: if the tiles fill fewer CTAs than the GPU holds, S = the largest split (<= 8, >= 4 k-steps
//    per slice) whose tiles x S CTAs fit in one wave (cudaOccupancyMaxActiveClusters); otherwise a persistent
//    S = 1 kernel takes floor(tiles / SMs) * SMs tiles (every CTA the same count) and the ragged remainder of
//    tiles is run by a second launch of the same kernel split S ways (e.g. M = 8828, N = 256: 132 + 6 tiles).
//  * Multicast pairs: a persistent launch of every tile (no split-K) with an even count of tiles per row runs in
//    clusters of two, the two CTAs on neighbouring tiles of one tile row, each loading half of their shared A rows
//    into both CTAs' stage with one multicast TMA: a quarter fewer operand bytes from L2 per product. On an H100,
//    128 plain CTAs at M 901, N 2048, K 4096 ran 1.8x as long as 64 with half the work (operand delivery from L2
//    holds them); in pairs they ran in 0.65x the plain span (MEASUREMENTS.md, twenty-eighth and twenty-ninth
//    sessions). Used past two thirds of the SMs; priced as the plain launch less the bytes it saves (see plan).
//  * Ragged edges: TMA zero-fills out-of-bounds rows (M, N) and columns (K); stores check row < M, col < N.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

// ------------------------------------------------------------------------------------------------------------
// Shared device helpers
// ------------------------------------------------------------------------------------------------------------

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

// The same load into the same offset of every CTA of the cluster in `mask`, each CTA's barrier at `bar` counting the
// bytes it receives.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int k, int row,
                                                      uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(k), "r"(row), "h"(mask) : "memory");
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
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
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

// D[64x128] (+)= A[64x16] · B[128x16]^T; scale_d = 0 overwrites D. 64 fp32 accumulators per thread:
// d[4j + 2h + e] is row 16*warp + lane/4 + 8h, column 8j + 2*(lane%4) + e (j = 0..15).
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db, uint32_t scale_d) {
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

// D[64x160] (+)= A[64x16] · B[160x16]^T; scale_d = 0 overwrites D. 80 fp32 accumulators per thread, laid out as in
// wgmma_m64n128k16 (j = 0..19).
__device__ __forceinline__ void wgmma_m64n160k16(float (&d)[80], uint64_t da, uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %82, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, "
        "%80, %81, p, 1, 1, 0, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
        : "l"(da), "l"(db), "r"(scale_d));
}

// The bf16 pair (lo, hi) as one 32-bit word, lo in the low half.
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&pair);
}

// A consumer warpgroup's finished 64 x (16 * PIECES) accumulator tile, rounded to bf16 in 16 B row pieces. In the
// m64nNk16 layout a quad of lanes (one row pair) holds each 8-column group as four bf16 pairs, one per lane; two
// shuffle rounds transpose the quad's groups 4i .. 4i+3 so that lane q = lane % 4 holds all of group 4i + q:
// piece[i][h] is row 16*warp + lane/4 + 8h, columns 32i + 8q .. + 7. A 16 B store per piece replaces four 4 B
// stores; the 4 B stores had cost the large kernel 5-8% at M 8192 (issue slots and store queue under the wgmmas).
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

// Stores parts [first, end) of PARTS equal parts of a packed tile (see pack_pieces) from one address with constant
// offsets; row and col are the thread's piece [0][0]. INSIDE: every piece is inside C (no checks). Otherwise each is
// bounds-checked; N % 8 == 0, so a piece is either wholly inside N or wholly outside.
template <bool INSIDE, int PARTS, int PIECES>
__device__ __forceinline__ void store_parts(__nv_bfloat16* C, const uint4 (&piece)[PIECES][2], int row, int col,
                                            int M, int N, int first, int end) {
    __nv_bfloat16* const at = C + (size_t)row * N + col;
#pragma unroll
    for (int p = 0; p < PARTS; ++p) {
        if (p < first || p >= end) continue;
#pragma unroll
        for (int i = p * PIECES / PARTS; i < (p + 1) * PIECES / PARTS; ++i) {
            if (!INSIDE && col + 32 * i >= N) continue;
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (INSIDE || row + 8 * h < M)
                    *reinterpret_cast<uint4*>(at + (size_t)(8 * h) * N + 32 * i) = piece[i][h];
        }
    }
}

template <int PARTS, int PIECES>
__device__ __forceinline__ void store_pieces(__nv_bfloat16* C, const uint4 (&piece)[PIECES][2], int row, int col,
                                             int M, int N, int first, int end) {
    if (row + 8 < M && col + 32 * (PIECES - 1) < N)   // every piece inside C: most tiles
        store_parts<true, PARTS>(C, piece, row, col, M, N, first, end);
    else
        store_parts<false, PARTS>(C, piece, row, col, M, N, first, end);
}

// Cluster helpers (sm_90). In a launch without a cluster every CTA is a cluster of one.
__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ uint32_t cluster_id_x() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}

// Cluster barrier, every thread of every CTA of the cluster arrives then waits. Not .aligned: callers diverge.
// release/acquire: the shared-memory writes each thread made before arriving are visible to every thread of the
// cluster after its wait (ptxas: MEMBAR.ALL.GPU before UCGABAR_ARV, CCTL.IVALL after UCGABAR_WAIT).
__device__ __forceinline__ void cluster_sync_release_acquire() {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// relaxed arrive: only execution is ordered (no membar). Used by the producer warpgroup, which publishes nothing
// and reads no peer's shared memory; the consumers, which do, use the release/acquire form for both barriers.
__device__ __forceinline__ void cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;" ::: "memory");
}

// One arrival on the barrier at shared::cluster address `bar` (another CTA's). Default semantics: with
// .release.cluster ptxas puts a MEMBAR.ALL.GPU before each (twelfth session: 0.65x).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}

// The shared::cluster address of the same offset in CTA `rank`'s shared memory.
__device__ __forceinline__ uint32_t map_rank(uint32_t local, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
    return r;
}

__device__ __forceinline__ float4 ld_cluster_f4(uint32_t addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}

// Grouped tile order of BM x BN tiles: bands of GROUP m-tiles, m fastest inside a band (tile t's origin).
template <int BM, int BN, int GROUP>
__device__ __forceinline__ void grouped_origin(int t, int num_m, int num_n, int& m0, int& n0) {
    const int per_band = GROUP * num_n;
    const int band = t / per_band;
    const int first_m = band * GROUP;
    const int band_m = min(num_m - first_m, GROUP);
    const int r = t - band * per_band;
    m0 = (first_m + r % band_m) * BM;
    n0 = (r / band_m) * BN;
}

constexpr int MAX_CLUSTER = 8;   // portable cluster size: the most K-slices of a cluster split

// Cluster split-K (both kernels): the CTAs of a cluster run the K-slices of one tile (rank = slice) and reduce
// through distributed shared memory. A CTA's fp32 partial tile is row-major in its own shared memory, element
// (r, c) of the BM x BN tile at r * BN + (c ^ ((r & 7) << 3)): the XOR (bits 3..5 of the column) spreads the 8 rows a
// warp's float2 store touches over all banks and keeps every aligned group of 4 columns contiguous for float4 reads.
template <int BN>
__device__ __forceinline__ int partial_index(int r, int c) { return r * BN + (c ^ ((r & 7) << 3)); }

// A consumer warpgroup's m64nBNk16 accumulators into the partial tile: d[4j + 2h + e] is tile row lrow + 8h, column
// lcol + 8j + e (lrow = 64 * warpgroup + 16 * warp + lane / 4, lcol = 2 * (lane % 4)).
template <int BN, int R>
__device__ __forceinline__ void write_partial(float* partial, const float (&d)[R], int lrow, int lcol) {
    static_assert(R == BN / 2, "m64nBNk16: BN / 2 accumulators per thread");
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(partial + partial_index<BN>(lrow + 8 * h, lcol + 8 * j)) =
                make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
}

// Run by the CT consumer threads (ct = 0..CT-1) once this CTA's partial tile is written; the producer warpgroup
// meets the same two cluster barriers with cluster_sync_relaxed. After the first barrier every rank's partial is
// visible; this CTA sums the float4 chunks [rank * total / splits, (rank + 1) * total / splits) of the tile (chunk
// c: row c / (BN / 4), columns 4 * (c % (BN / 4)) .. + 3) over ranks 0..splits-1 in rank order (deterministic) and
// keeps the bf16 results in registers; C is stored only after the exit barrier (no CTA leaves while a peer may
// still read its shared memory), so that barrier's release has no global stores to wait for.
template <int BM, int BN, int CT>
__device__ __forceinline__ void reduce_partials_store(uint32_t partial_s, int rank, int splits, int ct,
                                                      __nv_bfloat16* C, int m0, int n0, int M, int N) {
    constexpr int total = BM * BN / 4, per_row = BN / 4;
    constexpr int ITERS = (total / 2 + CT - 1) / CT;   // splits >= 2: at most total / 2 chunks per rank
    cluster_sync_release_acquire();
    const int c_begin = rank * total / splits, c_end = (rank + 1) * total / splits;
    uint32_t src[MAX_CLUSTER];
#pragma unroll
    for (int q = 0; q < MAX_CLUSTER; ++q) src[q] = q < splits ? map_rank(partial_s, (uint32_t)q) : 0u;
    uint2 packed[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const int c = c_begin + ct + i * CT;
        packed[i] = make_uint2(0u, 0u);
        if (c < c_end) {
            const uint32_t off = (uint32_t)partial_index<BN>(c / per_row, (c % per_row) * 4) * 4u;
            float4 v[MAX_CLUSTER];
#pragma unroll
            for (int q = 0; q < MAX_CLUSTER; ++q)
                if (q < splits) v[q] = ld_cluster_f4(src[q] + off);
            float4 sum = v[0];
#pragma unroll
            for (int q = 1; q < MAX_CLUSTER; ++q)
                if (q < splits) { sum.x += v[q].x; sum.y += v[q].y; sum.z += v[q].z; sum.w += v[q].w; }
            packed[i] = make_uint2(bf16_pair(sum.x, sum.y), bf16_pair(sum.z, sum.w));
        }
    }
    cluster_sync_release_acquire();   // release: this thread's DSMEM loads are ordered before its arrival
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const int c = c_begin + ct + i * CT;
        const int gr = m0 + c / per_row, gc = n0 + (c % per_row) * 4;
        if (c < c_end && gr < M && gc < N) {        // N % 8 == 0 and gc % 4 == 0: gc + 3 < N too
            uint32_t* dst = reinterpret_cast<uint32_t*>(C + (size_t)gr * N + gc);   // 4 B aligned
            dst[0] = packed[i].x;
            dst[1] = packed[i].y;
        }
    }
}

// Row-major [rows, K] bf16 matrix, box = box_rows x 64, 128B swizzle, out-of-bounds reads as zero.
bool encode_kmajor(CUtensorMap* map, const void* ptr, int rows, int K, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * sizeof(__nv_bfloat16)};
    const cuuint32_t box[2] = {64u, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

constexpr int MAX_DEVICES = 64;

// Cluster launch attributes: clusters of `s` CTAs along x (none for s = 1).
void set_cluster(cudaLaunchConfig_t& config, cudaLaunchAttribute& attribute, int s) {
    if (s <= 1) return;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = (unsigned)s;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
}

// A kernel's clusters of `s` CTAs resident at once (s = 1: the SM count), cached per device; a failed query is
// replaced by sms / s (the hardware then runs any excess in a later wave: slower, never wrong). The kernel's
// shared-memory attribute must be set before the first query.
struct ClusterFit {
    const void* kernel;
    int threads;
    size_t smem;
    int cache[MAX_DEVICES][MAX_CLUSTER + 1] = {};

    int capacity(int dev, int sms, int s) {
        if (s <= 1) return sms;
        int* slot = (dev >= 0 && dev < MAX_DEVICES) ? &cache[dev][s] : nullptr;
        if (slot && *slot > 0) return *slot;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3((unsigned)s, 1, 1);
        config.blockDim = dim3((unsigned)threads, 1, 1);
        config.dynamicSmemBytes = smem;
        cudaLaunchAttribute attribute;
        set_cluster(config, attribute, s);
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess || clusters <= 0) {
            cudaGetLastError();                               // clear the failed query's error
            clusters = sms / s;
        }
        if (clusters < 1) clusters = 1;
        if (slot) *slot = clusters;
        return clusters;
    }

    // The largest split in [1, most] (most <= MAX_CLUSTER) whose `tiles` clusters all fit at once (1 if none does).
    int split(int dev, int sms, long long tiles, int most) {
        for (int s = most; s >= 2; --s)
            if (tiles * s <= sms && tiles <= capacity(dev, sms, s)) return s;
        return 1;
    }
};

// Cost model, in SM clocks (fitted guesses, see the header): one k-step of a tile per kernel and tile height, a
// cluster reduction, one extra launch, DRAM bytes per clock.
constexpr double STEP_CLK_LARGE = 760.0;  // 128x256x64: twice the tensor work of 128x128x64, fewer bytes per FLOP
constexpr double STEP_CLK_A = 384.0;      // 64x128x64: 256 clk of tensor work, bound by 24 KB of operands
constexpr double STEP_CLK_B = 560.0;      // 128x128x64: 512 clk of tensor work, 32 KB of operands
constexpr double STEP_CLK_WIDE = 930.0;   // 256x160x64: 1.25x the large tile's work (fitted on an H100 over 66 shapes)
constexpr double RED_CLK_A = 1000.0;
constexpr double RED_CLK_B = 1600.0;
constexpr double RED_CLK_LARGE = 12000.0;       // a cluster split's fixed cost: its reduction took 6-8 us (H100)
constexpr double RED_CLK_LARGE_SLICE = 2000.0;  // and its cost per slice: each adds a 128 KB partial tile over DSMEM
constexpr double LAUNCH_CLK = 2000.0;
constexpr double HEAD_SLOW = 0.3;         // a BN = 128 head over all SMs, unpaired: its k-steps 30% slower (H100)
constexpr double FIXUP_CLK = 1500.0;      // per slice of a split last-wave tile: a 128 KB slab through L2
constexpr double CHAIN_CLK = 9000.0;      // per slice of a chained split (fitted on an H100: it pays at K >= 17408)
constexpr double DRAM_BYTES_PER_CLK = 2000.0;

// The DRAM floor of any plan: A, B and C each moved once.
double dram_clk(int M, int N, int K) {
    return 2.0 * ((double)M * K + (double)N * K + (double)M * N) / DRAM_BYTES_PER_CLK;
}

// ------------------------------------------------------------------------------------------------------------
// Large-tile kernel: persistent 128x256 tiles
// ------------------------------------------------------------------------------------------------------------
namespace large {

constexpr int BM = 128, BN = 256, BK = 64;      // CTA tile; BK * 2 bytes = 128 B = one swizzle row
constexpr int STAGES = 4;
constexpr int CONSUMERS = 2;                    // consumer warpgroups, BM / CONSUMERS = 64 rows each
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int GROUP_M = 16;                     // m-tiles per band of the tile order
constexpr int HELD_PARTS = 4;                   // a held tile is stored in parts, one per k-step of the next
constexpr int MIN_K_ITERS = 4;                  // least k-steps per split-K slice
constexpr int MAX_SPLITS = 16;
constexpr uint32_t A_BYTES = BM * BK * 2;       // 16 KB per stage
constexpr uint32_t B_BYTES = BN * BK * 2;       // 32 KB per stage
constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int SLAB_F4 = BM * BN / 4;            // one tile's fp32 accumulators in float4s (128 KB)
// 1 KB slack to align the ring to the 1024 B swizzle atom, the ring, then full/empty barriers.
constexpr size_t SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;

// One CTA's unit of work: a whole tile (slice < 0), or K-slice `slice` of `splits` of a tile after the first
// `whole` tiles, k-steps [k_begin, k_end).
struct Unit {
    int tile, slice, k_begin, k_end;
};

__device__ __forceinline__ Unit unit_of(int u, int whole, int splits, int k_iters) {
    if (u < whole) return {u, -1, 0, k_iters};
    const int v = u - whole, slice = v % splits;
    return {whole + v / splits, slice, slice * k_iters / splits, (slice + 1) * k_iters / splits};
}

// The 256 consumer threads meet (named barrier 1; the producer warpgroup takes no part).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

__device__ __forceinline__ void red_release_add(unsigned* counter, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(counter), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* counter) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    return v;
}

// How a split tile's K-slices are summed (see gemm_bf16_tn_kernel).
enum Reduce : int { NONE, CLUSTER, SLABS, CHAIN };

constexpr int CHAIN_BLOCKS = 4;   // row blocks of a chained tile, each passed on alone (a counter each)

// Passes row block `b` of one K-slice of a chained split (one slice per CTA, its fp32 partial tile in shared memory as
// write_partial leaves it) along the tile's chain: slice q > 0 adds the running sum of slices 0..q-1, then passes the
// sum on or, the last, stores C. Run by the 256 consumer threads once slices 0..q-1 have passed the block. The running
// sum (rows < M, columns < N) is held as fp32 bit halves: the high halves in the tile's own C, where the last slice's
// results go, the low halves in the workspace (`low`, row-major M x N), so that it and the counters fit in the task's
// 4 * M * N bytes. The block's loads are all issued before any is used: one L2 round trip, not one per chunk.
__device__ __forceinline__ void chain_link(const float* partial, int ct, int b, int slice, int splits, __nv_bfloat16* C,
                                           uint16_t* low, int m0, int n0, int M, int N) {
    constexpr int per_row = BN / 4, ITERS = BM / CHAIN_BLOCKS * per_row / 256;
    uint2 h[ITERS], l[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {   // float4 chunk c: row c / per_row, columns 4 * (c % per_row) .. + 3
        const int c = b * (BM / CHAIN_BLOCKS) * per_row + ct + 256 * i, r = c / per_row, col = 4 * (c % per_row);
        const size_t at = (size_t)(m0 + r) * N + n0 + col;   // 8 B aligned: N % 8 == 0, col % 4 == 0
        h[i] = l[i] = make_uint2(0u, 0u);
        if (slice > 0 && m0 + r < M && n0 + col < N) {      // N % 8 == 0: a chunk is wholly inside N or outside
            h[i] = __ldcg(reinterpret_cast<const uint2*>(C + at));
            l[i] = __ldcg(reinterpret_cast<const uint2*>(low + at));
        }
    }
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const int c = b * (BM / CHAIN_BLOCKS) * per_row + ct + 256 * i, r = c / per_row, col = 4 * (c % per_row);
        if (m0 + r >= M || n0 + col >= N) continue;
        const size_t at = (size_t)(m0 + r) * N + n0 + col;
        float4 v = *reinterpret_cast<const float4*>(partial + partial_index<BN>(r, col));
        v.x += __uint_as_float(__byte_perm(l[i].x, h[i].x, 0x5410));   // zero halves: +0.0f
        v.y += __uint_as_float(__byte_perm(l[i].x, h[i].x, 0x7632));
        v.z += __uint_as_float(__byte_perm(l[i].y, h[i].y, 0x5410));
        v.w += __uint_as_float(__byte_perm(l[i].y, h[i].y, 0x7632));
        uint2* const hi = reinterpret_cast<uint2*>(C + at);
        if (slice == splits - 1) {
            *hi = make_uint2(bf16_pair(v.x, v.y), bf16_pair(v.z, v.w));
            continue;
        }
        const uint32_t x = __float_as_uint(v.x), y = __float_as_uint(v.y);
        const uint32_t z = __float_as_uint(v.z), w = __float_as_uint(v.w);
        __stcg(hi, make_uint2(__byte_perm(x, y, 0x7632), __byte_perm(z, w, 0x7632)));
        __stcg(reinterpret_cast<uint2*>(low + at), make_uint2(__byte_perm(x, y, 0x5410), __byte_perm(z, w, 0x5410)));
    }
}

// Tiles [0, whole) whole; every later tile cut into `splits` K-slices, summed by `reduce`:
//  * CLUSTER (whole = 0, launched in clusters of `splits`, one slice per CTA): through distributed shared memory, each
//    CTA's partial tile written into its ring, idle by then (reduce_partials_store);
//  * SLABS (a ragged last wave): slices but the last store their accumulators in a slab (`work`) and count themselves
//    in the tile's counter (zeroed before the launch); the last waits for the count, adds the slabs in fixed order
//    (deterministic) and stores the tile;
//  * CHAIN (whole = 0, one slice per CTA, where clusters of `splits` do not all fit at once): row block by row block,
//    slice q waits until the block's counter reads q, passes the running sum on (chain_link, the low halves in `work`)
//    and counts itself, so that the slices pass a tile's blocks as a pipeline; a fixed order again. Slice q waits only
//    on lower slices, which run on lower-numbered CTAs.
__global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_tn_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                    __nv_bfloat16* __restrict__ C, void* __restrict__ work, unsigned* __restrict__ counters,
                    int M, int N, int K, int whole, int splits, Reduce reduce) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t ring = (smem_base + 1023u) & ~1023u;
    const uint32_t smem_a = ring;                        // STAGES x [128 rows x 128 B]
    const uint32_t smem_b = ring + STAGES * A_BYTES;     // STAGES x [256 rows x 128 B]
    const uint32_t full_bar = smem_b + STAGES * B_BYTES; // STAGES x 8 B
    const uint32_t empty_bar = full_bar + STAGES * 8;    // STAGES x 8 B

    const int num_m = (M + BM - 1) / BM, num_n = (N + BN - 1) / BN;
    const int num_units = whole + (num_m * num_n - whole) * splits;
    const int k_iters = (K + BK - 1) / BK;
    const int wg = threadIdx.x / 128;
    const bool cluster = reduce == CLUSTER;

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
                const Unit w = unit_of(u, whole, splits, k_iters);
                int m0, n0;
                grouped_origin<BM, BN, GROUP_M>(w.tile, num_m, num_n, m0, n0);
                for (int k = w.k_begin; k < w.k_end; ++k) {
                    mbar_wait(empty_bar + 8 * s, phase ^ 1);   // fresh barriers pass parity 1 at once
                    mbar_arrive_expect_tx(full_bar + 8 * s, STAGE_BYTES);
                    tma_load_2d(smem_a + s * A_BYTES, &tmap_a, full_bar + 8 * s, k * BK, m0);
                    tma_load_2d(smem_b + s * B_BYTES, &tmap_b, full_bar + 8 * s, k * BK, n0);
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
        }
        if (cluster) {      // the producer warpgroup takes part in both cluster barriers of the reduction
            cluster_sync_relaxed();
            cluster_sync_relaxed();
        }
    } else {
        // ---------------- consumer warpgroups ----------------
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        // Rows [64*cw, 64*cw+64) of the tile. Through a warp reduction so that ptxas knows it warp-uniform and
        // builds the A descriptors on the uniform datapath (as a per-thread value, 8 R2UR per k-step).
        const int cw = (int)__reduce_or_sync(0xffffffffu, (unsigned)(wg - 1));
        const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
        float acc[128];
        // The previous tile's results, packed (see pack_pieces), stored a part under each of the next tile's first
        // HELD_PARTS k-steps (held_row < 0: none held). held_row and held_col locate the thread's piece [0][0].
        uint4 held[BN / 32][2];
        int held_row = -1, held_col = 0;
        const int row_in_tile = cw * 64 + warp * 16 + lane / 4, col_in_tile = 8 * (lane & 3);
        int s = 0;
        uint32_t phase = 0;
        const uint64_t da0 = smem_desc(smem_a + cw * 64 * 128), db0 = smem_desc(smem_b);   // stage 0
        for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
            const Unit w = unit_of(u, whole, splits, k_iters);
            int m0, n0;
            grouped_origin<BM, BN, GROUP_M>(w.tile, num_m, num_n, m0, n0);
            const int k_begin = w.k_begin, k_end = w.k_end;
            int prev = 0;
            for (int k = k_begin; k < k_end; ++k) {
                mbar_wait(full_bar + 8 * s, phase);
                const uint64_t da = da0 + (uint64_t)(s * (A_BYTES >> 4));   // descriptors count 16 B units
                const uint64_t db = db0 + (uint64_t)(s * (B_BYTES >> 4));
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)        // +32 B along K = +2 in the descriptor
                    wgmma_m64n256k16(acc, da + 2 * kk, db + 2 * kk, (k > k_begin || kk > 0) ? 1u : 0u);
                wgmma_commit();
                if (held_row >= 0 && k - k_begin < HELD_PARTS) {   // under the tensor cores' work on this k-step
                    store_pieces<HELD_PARTS>(C, held, held_row, held_col, M, N, k - k_begin, k - k_begin + 1);
                    if (k - k_begin == HELD_PARTS - 1) held_row = -1;
                }
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
            if (held_row >= 0) {                             // a tile shorter than HELD_PARTS k-steps
                store_pieces<HELD_PARTS>(C, held, held_row, held_col, M, N, k_end - k_begin, HELD_PARTS);
                held_row = -1;
            }

            if (reduce == SLABS && w.slice >= 0) {           // a slice of the last wave's tiles
                const int ct = threadIdx.x - 128, t = w.tile - whole;
                float4* const mine = static_cast<float4*>(work) + (size_t)t * (splits - 1) * SLAB_F4 + ct;
                if (w.slice < splits - 1) {                  // publish: stores, fence, then count (one thread)
#pragma unroll
                    for (int i = 0; i < 32; ++i)
                        __stcg(mine + (size_t)w.slice * SLAB_F4 + 256 * i,
                               make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
                    __threadfence();
                    consumers_sync();
                    if (ct == 0) red_release_add(counters + t, 1u);
                    continue;
                }
                if (ct == 0)
                    while (ld_acquire(counters + t) != (unsigned)(splits - 1)) __nanosleep(100);
                consumers_sync();
                for (int q = 0; q < splits - 1; ++q) {
#pragma unroll
                    for (int i = 0; i < 32; ++i) {
                        const float4 v = __ldcg(mine + (size_t)q * SLAB_F4 + 256 * i);
                        acc[4 * i] += v.x;
                        acc[4 * i + 1] += v.y;
                        acc[4 * i + 2] += v.z;
                        acc[4 * i + 3] += v.w;
                    }
                }
            }
            if (w.slice < 0 || reduce == SLABS) {            // held while the next tile's first k-steps run
                pack_pieces(acc, held, lane & 3);
                held_row = m0 + row_in_tile;
                held_col = n0 + col_in_tile;
                continue;
            }
            // A cluster or chained split: this CTA's one unit, reduced below.
        }
        if (held_row >= 0) store_pieces<HELD_PARTS>(C, held, held_row, held_col, M, N, 0, HELD_PARTS);
        if (cluster || reduce == CHAIN) {   // the partial tile into the ring, once both warpgroups' last wgmmas read it
            const Unit w = unit_of((int)blockIdx.x, 0, splits, k_iters);   // slice = the rank in a cluster
            const int ct = threadIdx.x - 128;
            int m0, n0;
            grouped_origin<BM, BN, GROUP_M>(w.tile, num_m, num_n, m0, n0);
            consumers_sync();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the ring was last the async proxy's
            float* const partial = reinterpret_cast<float*>(smem_raw + (ring - smem_base));
            write_partial<BN>(partial, acc, row_in_tile, 2 * (lane & 3));
            if (cluster) {
                reduce_partials_store<BM, BN, 256>(ring, w.slice, splits, ct, C, m0, n0, M, N);
            } else {
                unsigned* const count = counters + (size_t)w.tile * CHAIN_BLOCKS;
                consumers_sync();   // the whole partial tile written
                for (int b = 0; b < CHAIN_BLOCKS; ++b) {
                    if (w.slice > 0) {                      // the running sum of slices 0..q-1 there
                        if (ct == 0)
                            while (ld_acquire(count + b) != (unsigned)w.slice) __nanosleep(32);
                        consumers_sync();
                    }
                    chain_link(partial, ct, b, w.slice, splits, C, static_cast<uint16_t*>(work), m0, n0, M, N);
                    if (w.slice < splits - 1) {             // publish: stores, fence, then count (one thread)
                        __threadfence();
                        consumers_sync();
                        if (ct == 0) red_release_add(count + b, 1u);
                    }
                }
            }
        }
    }
}

long long tile_count(int M, int N) { return (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN); }

// How the kernel covers C (see gemm_bf16_tn_kernel): tiles [0, whole) whole, the rest cut into `splits` K-slices
// summed by `reduce`.
struct Plan {
    long long whole = 0, splits = 1;
    Reduce reduce = NONE;
    double cost = 1e300;
};

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace a tail of `rem` tiles cut `splits` ways needs: counters (256 B aligned), then the slabs.
size_t tail_bytes(long long rem, long long splits) {
    return align256((size_t)rem * sizeof(unsigned)) + (size_t)rem * (splits - 1) * SLAB_F4 * sizeof(float4);
}

// The workspace a chained split needs: the running sum's low halves (M x N u16, 256 B aligned), then the counters.
size_t chain_bytes(int M, int N, long long tiles) {
    return align256((size_t)M * N * sizeof(uint16_t)) + (size_t)tiles * CHAIN_BLOCKS * sizeof(unsigned);
}

ClusterFit fit{reinterpret_cast<const void*>(gemm_bf16_tn_kernel), THREADS, SMEM_BYTES};

// Every tile split when the tiles fill under half the SMs: across a cluster, or by a chain where it gets more slices
// (clusters are placed whole in a GPC, so fewer fit than SMs / splits); otherwise whole waves of whole tiles and,
// where cheaper and the workspace holds the slabs, the ragged last wave's tiles split across the idle SMs.
// No workspace (the row split's head): whole tiles only.
Plan plan(int dev, int M, int N, int K, int sms, const void* workspace, size_t workspace_bytes) {
    const long long tiles = tile_count(M, N), k_iters = (K + BK - 1) / BK;
    long long most = k_iters / MIN_K_ITERS;
    if (most > MAX_SPLITS) most = MAX_SPLITS;
    const double dram = dram_clk(M, N, K);
    const bool aligned = workspace && !(reinterpret_cast<uintptr_t>(workspace) & 15);
    Plan p;
    p.whole = tiles;
    p.cost = (double)((tiles + sms - 1) / sms) * k_iters * STEP_CLK_LARGE;
    if (workspace && 2 * tiles <= sms) {
        const int s = fit.split(dev, sms, tiles, (int)(most < MAX_CLUSTER ? most : MAX_CLUSTER));
        const double c = (double)((k_iters + s - 1) / s) * STEP_CLK_LARGE + RED_CLK_LARGE + RED_CLK_LARGE_SLICE * s;
        if (s > 1 && c < p.cost) p = Plan{0, s, CLUSTER, c};
        for (long long s = 2; aligned && s <= most && tiles * s <= sms && chain_bytes(M, N, tiles) <= workspace_bytes;
             ++s) {
            const double c = (double)((k_iters + s - 1) / s) * STEP_CLK_LARGE + CHAIN_CLK * s + LAUNCH_CLK;
            if (c < p.cost) p = Plan{0, s, CHAIN, c};
        }
    } else if (aligned && tiles % sms > 0) {
        const long long rem = tiles % sms, waves = tiles / sms;
        for (long long s = 2; s <= most && rem * s <= sms && tail_bytes(rem, s) <= workspace_bytes; ++s) {
            const double c = (double)(waves * k_iters + (k_iters + s - 1) / s) * STEP_CLK_LARGE + FIXUP_CLK * s +
                             LAUNCH_CLK;
            if (c < p.cost && p.cost > dram) p = Plan{tiles - rem, s, SLABS, c};   // never for a DRAM-bound launch
        }
    }
    if (p.cost < dram) p.cost = dram;
    return p;
}

double cost(int dev, int M, int N, int K, int sms, const void* workspace, size_t workspace_bytes) {
    return plan(dev, M, N, K, sms, workspace, workspace_bytes).cost;
}

// The launch, after the argument checks and the kernel's shared-memory attribute.
cudaError_t launch(int dev, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                   void* workspace, size_t workspace_bytes, int sms, cudaStream_t stream) {
    CUtensorMap tmap_a, tmap_b;
    if (!encode_kmajor(&tmap_a, A, M, K, BM) || !encode_kmajor(&tmap_b, B, N, K, BN))
        return cudaErrorInvalidValue;
    const Plan p = plan(dev, M, N, K, sms, workspace, workspace_bytes);
    const long long rem = tile_count(M, N) - p.whole, units = p.whole + rem * p.splits;
    void* work = nullptr;
    unsigned* counters = nullptr;
    if (p.reduce == SLABS) {                         // counters first, the slabs from the next 256 B
        counters = static_cast<unsigned*>(workspace);
        work = static_cast<char*>(workspace) + tail_bytes(rem, 1);
    } else if (p.reduce == CHAIN) {                  // the low halves first, the counters from the next 256 B
        work = workspace;
        counters = reinterpret_cast<unsigned*>(static_cast<char*>(workspace) + chain_bytes(M, N, 0));
    }
    if (counters) {
        const size_t count = (size_t)rem * (p.reduce == CHAIN ? CHAIN_BLOCKS : 1);
        const cudaError_t err = cudaMemsetAsync(counters, 0, count * sizeof(unsigned), stream);
        if (err != cudaSuccess) return err;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)(units < sms ? units : sms), 1, 1);   // a cluster or chained split: units <= sms
    config.blockDim = dim3(THREADS, 1, 1);
    config.dynamicSmemBytes = SMEM_BYTES;
    config.stream = stream;
    cudaLaunchAttribute attribute;
    set_cluster(config, attribute, p.reduce == CLUSTER ? (int)p.splits : 1);
    return cudaLaunchKernelEx(&config, gemm_bf16_tn_kernel, tmap_a, tmap_b, C, work, counters, M, N, K,
                              (int)p.whole, (int)p.splits, p.reduce);
}

}  // namespace large

// ------------------------------------------------------------------------------------------------------------
// Wide-tile kernel: persistent 256x160 tiles, whole tiles only
// ------------------------------------------------------------------------------------------------------------
// For shapes whose 128x256 tiles leave a ragged last wave that 256x160 tiles fill (e.g. N = 5120, M = 901-972: 128
// tiles in one wave, where 128x256 tiles take 160). 1 TMA producer + 2 consumer warpgroups of 128 rows each (two
// wgmma.m64n160k16 per 16 columns of K, 160 fp32 accumulators per thread), a 4-stage ring of 52 KB. The accumulators
// leave no registers to hold a finished tile under the next one's k-steps (the large kernel's way), so a tile is
// stored straight away in 16 B row pieces while the producer fills the ring for the next.
namespace wide {

constexpr int BM = 256, BN = 160, BK = 64;
constexpr int STAGES = 4;
constexpr int CONSUMERS = 2;                    // consumer warpgroups, 128 rows each
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int GROUP_M = 8;                      // m-tiles per band of the tile order
constexpr uint32_t A_BYTES = BM * BK * 2;       // 32 KB per stage
constexpr uint32_t B_BYTES = BN * BK * 2;       // 20 KB per stage (a multiple of the 1024 B swizzle atom)
constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
constexpr uint32_t HALF_DESC = 64 * 128 >> 4;   // 64 rows of A further on, in descriptor units of 16 B
constexpr size_t SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;

__global__ void __launch_bounds__(THREADS, 1)
gemm_wide_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                 __nv_bfloat16* __restrict__ C, int M, int N, int K) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t ring = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t smem_a = ring;                        // STAGES x [256 rows x 128 B]
    const uint32_t smem_b = ring + STAGES * A_BYTES;     // STAGES x [160 rows x 128 B]
    const uint32_t full_bar = smem_b + STAGES * B_BYTES; // STAGES x 8 B
    const uint32_t empty_bar = full_bar + STAGES * 8;    // STAGES x 8 B

    const int num_m = (M + BM - 1) / BM, num_n = (N + BN - 1) / BN, tiles = num_m * num_n;
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

    int s = 0;
    uint32_t phase = 0;
    if (wg == 0) {
        // ---------------- producer warpgroup ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x != 0) return;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int m0, n0;
            grouped_origin<BM, BN, GROUP_M>(t, num_m, num_n, m0, n0);
            for (int k = 0; k < k_iters; ++k) {
                mbar_wait(empty_bar + 8 * s, phase ^ 1);   // fresh barriers pass parity 1 at once
                mbar_arrive_expect_tx(full_bar + 8 * s, STAGE_BYTES);
                tma_load_2d(smem_a + s * A_BYTES, &tmap_a, full_bar + 8 * s, k * BK, m0);
                tma_load_2d(smem_b + s * B_BYTES, &tmap_b, full_bar + 8 * s, k * BK, n0);
                if (++s == STAGES) { s = 0; phase ^= 1; }
            }
        }
        return;
    }
    // ---------------- consumer warpgroups ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    // Rows [128*cw, 128*cw+128) of the tile, warp-uniform for ptxas (see the large kernel).
    const int cw = (int)__reduce_or_sync(0xffffffffu, (unsigned)(wg - 1));
    const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
    float acc[2][80];   // acc[h]: rows 128*cw + 64h .. + 63
    const uint64_t da0 = smem_desc(smem_a + cw * 128 * 128), db0 = smem_desc(smem_b);   // stage 0
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int m0, n0;
        grouped_origin<BM, BN, GROUP_M>(t, num_m, num_n, m0, n0);
        int prev = 0;
        for (int k = 0; k < k_iters; ++k) {
            mbar_wait(full_bar + 8 * s, phase);
            const uint64_t da = da0 + (uint64_t)(s * (A_BYTES >> 4)), db = db0 + (uint64_t)(s * (B_BYTES >> 4));
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {           // +32 B along K = +2 in the descriptor
                const uint32_t scale = (k > 0 || kk > 0) ? 1u : 0u;
                wgmma_m64n160k16(acc[0], da + 2 * kk, db + 2 * kk, scale);
                wgmma_m64n160k16(acc[1], da + HALF_DESC + 2 * kk, db + 2 * kk, scale);
            }
            wgmma_commit();
            // Keep one k-step in flight; the previous one has now retired, so free its stage.
            wgmma_wait<1>();
            fence_acc(acc[0]);
            fence_acc(acc[1]);
            if (k > 0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);
            prev = s;
            if (++s == STAGES) { s = 0; phase ^= 1; }
        }
        wgmma_wait<0>();
        fence_acc(acc[0]);
        fence_acc(acc[1]);
        if (lane == 0) mbar_arrive(empty_bar + 8 * prev);
        const int row = m0 + cw * 128 + warp * 16 + lane / 4, col = n0 + 8 * (lane & 3);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint4 piece[BN / 32][2];
            pack_pieces(acc[h], piece, lane & 3);
            store_pieces<1>(C, piece, row + 64 * h, col, M, N, 0, 1);
        }
    }
}

long long tile_count(int M, int N) { return (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN); }

// Whole waves of whole tiles; DRAM-bound shapes priced at the floor.
double cost(int M, int N, int K, int sms) {
    const double c = (double)((tile_count(M, N) + sms - 1) / sms) * ((K + BK - 1) / BK) * STEP_CLK_WIDE;
    const double dram = dram_clk(M, N, K);
    return c > dram ? c : dram;
}

cudaError_t launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K, int sms,
                   cudaStream_t stream) {
    CUtensorMap tmap_a, tmap_b;
    if (!encode_kmajor(&tmap_a, A, M, K, BM) || !encode_kmajor(&tmap_b, B, N, K, BN))
        return cudaErrorInvalidValue;
    const long long tiles = tile_count(M, N);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)(tiles < sms ? tiles : sms), 1, 1);
    config.blockDim = dim3(THREADS, 1, 1);
    config.dynamicSmemBytes = SMEM_BYTES;
    config.stream = stream;
    return cudaLaunchKernelEx(&config, gemm_wide_kernel, tmap_a, tmap_b, C, M, N, K);
}

}  // namespace wide

// ------------------------------------------------------------------------------------------------------------
// BN = 128 kernel: two tile heights, cluster split-K reduced through distributed shared memory
// ------------------------------------------------------------------------------------------------------------
namespace narrow {

constexpr int BN = 128, BK = 64;       // BK * 2 bytes = 128 B = one swizzle row
constexpr int MAX_SPLITS = MAX_CLUSTER;
constexpr int MIN_K_ITERS = 4;         // least k-steps per split-K slice
constexpr int MIN_TAIL_K_ITERS = 16;   // a ragged last wave is split only when a tile is at least this long
constexpr size_t SMEM_LIMIT = 232448;  // 227 KB per block on sm_90
constexpr bool PAIRS = true;           // multicast pairs where they apply (see the kernel)

template <int CW, int STAGES>
struct Cfg {
    static constexpr int BM = 64 * CW;                       // CW consumer warpgroups of 64 rows each
    static constexpr int THREADS = 128 * (1 + CW);
    static constexpr uint32_t A_BYTES = BM * BK * 2;         // one stage of A: BM rows x 128 B
    static constexpr uint32_t B_BYTES = BN * BK * 2;         // one stage of B: 128 rows x 128 B
    static constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr uint32_t RING_BYTES = STAGES * STAGE_BYTES;
    static constexpr uint32_t BAR_BYTES = 128;               // full[STAGES], empty[STAGES], 16 B aligned end
    static constexpr uint32_t PARTIAL_BYTES = BM * BN * 4;   // fp32 partial tile for the cluster reduction
    // 1 KB slack to align the ring to the 1024 B swizzle atom, the ring, the barriers, the partial tile.
    static constexpr size_t SMEM_BYTES = 1024 + RING_BYTES + BAR_BYTES + PARTIAL_BYTES;
    static_assert(2 * STAGES * 8 <= (int)BAR_BYTES, "barriers overflow their area");
    static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "stages must keep 1024 B alignment");
    static_assert(SMEM_BYTES <= SMEM_LIMIT, "shared memory over 227 KB");
};

// Kernel over tiles [tile_begin, tile_begin + num_tiles) of the grid of BM x 128 tiles (n fastest).
// splits == 1: ordinary launch, persistent: CTA b takes tiles b, b + gridDim.x, ... over all of K.
// splits  > 1: cluster launch of (splits, 1, 1), gridDim.x == num_tiles * splits: cluster c takes tile c,
//              its CTA of rank r the k-steps [r * k_iters / splits, (r + 1) * k_iters / splits).
// pair (splits == 1, tile_begin == 0, num_tiles and the tiles per row even, gridDim.x even): persistent clusters of
//              two, cluster c taking tile pairs (2p, 2p + 1) for p = c, c + gridDim.x / 2, ..., its rank r tile
//              2p + r. The pair's tiles share their A rows: rank r loads half r of them (tmap_a's box is BM / 2
//              rows) into both CTAs' stage with one multicast, so that L2 serves a quarter less per product. A stage
//              is refilled once both CTAs' consumers have freed it (each consumer warp arrives on both CTAs' empty
//              barrier); cluster barriers after the barriers' init and before exit (no CTA leaves while its peer may
//              still write into it).
template <int CW, int STAGES>
__global__ void __launch_bounds__(Cfg<CW, STAGES>::THREADS, 1)
gemm_narrow_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                   __nv_bfloat16* __restrict__ C, int M, int N, int K, int tile_begin, int num_tiles, int splits,
                   bool pair) {
    using G = Cfg<CW, STAGES>;
    constexpr int BM = G::BM;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t ring = (smem_base + 1023u) & ~1023u;
    const uint32_t smem_a = ring;                              // STAGES x [BM rows x 128 B]
    const uint32_t smem_b = ring + STAGES * G::A_BYTES;        // STAGES x [128 rows x 128 B]
    const uint32_t full_bar = smem_b + STAGES * G::B_BYTES;    // STAGES x 8 B
    const uint32_t empty_bar = full_bar + STAGES * 8;          // STAGES x 8 B
    const uint32_t partial_s = ring + G::RING_BYTES + G::BAR_BYTES;   // 16 B aligned
    float* const partial = reinterpret_cast<float*>(smem_raw + (partial_s - smem_base));

    const int num_n = (N + BN - 1) / BN;
    const int k_iters = (K + BK - 1) / BK;
    const bool split = splits > 1;
    const int rank = split ? (int)cluster_ctarank() : 0;
    const int half = pair ? (int)cluster_ctarank() : 0;       // pair: this CTA's tile of two, its half of A
    const int first = split || pair ? (int)cluster_id_x() : (int)blockIdx.x;
    const int stride = split ? num_tiles : pair ? (int)gridDim.x / 2 : (int)gridDim.x;   // split: one tile per CTA
    const int units = pair ? num_tiles / 2 : num_tiles;       // tiles, or tile pairs
    const int k_begin = rank * k_iters / splits, k_end = (rank + 1) * k_iters / splits;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_a)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_b)) : "memory");
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_bar + 8 * s, 1);
            mbar_init(empty_bar + 8 * s, CW * 4 * (pair ? 2 : 1));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (pair)
        cluster_sync_release_acquire();   // the peer's barriers initialised before anything lands on them
    else
        __syncthreads();

    if (wg == 0) {
        // ---------------- producer warpgroup ----------------
        // With one consumer warpgroup the whole register file is there for the taking (256 threads): no
        // reallocation. With two, the producer hands its registers to the consumers, as in the large-N kernel.
        if constexpr (CW > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            int s = 0;
            uint32_t phase = 0;
            for (int t = first; t < units; t += stride) {
                const int tile = tile_begin + (pair ? 2 * t + half : t);
                const int m0 = (tile / num_n) * BM, n0 = (tile % num_n) * BN;
                for (int k = k_begin; k < k_end; ++k) {
                    mbar_wait(empty_bar + 8 * s, phase ^ 1);   // fresh barriers pass parity 1 at once
                    mbar_arrive_expect_tx(full_bar + 8 * s, G::STAGE_BYTES);   // a pair: half of A from the peer
                    if (pair)
                        tma_load_2d_multicast(smem_a + s * G::A_BYTES + half * (G::A_BYTES / 2), &tmap_a,
                                              full_bar + 8 * s, k * BK, m0 + half * (BM / 2), 0x3);
                    else
                        tma_load_2d(smem_a + s * G::A_BYTES, &tmap_a, full_bar + 8 * s, k * BK, m0);
                    tma_load_2d(smem_b + s * G::B_BYTES, &tmap_b, full_bar + 8 * s, k * BK, n0);
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
        }
        if (split) {        // the producer warpgroup takes part in both cluster barriers of the reduction
            cluster_sync_relaxed();   // it publishes nothing: relaxed arrives are enough on its side
            cluster_sync_relaxed();
        }
    } else {
        // ---------------- consumer warpgroups ----------------
        if constexpr (CW > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int cw = (int)__reduce_or_sync(0xffffffffu, (unsigned)(wg - 1));   // rows [64*cw, +64), warp-uniform
        const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
        float acc[64];
        int s = 0;
        uint32_t phase = 0;
        int m0 = 0, n0 = 0;
        // A freed stage is counted in this CTA and, in a pair, in the peer, whose producer refills both.
        const uint32_t peer_empty = pair ? map_rank(empty_bar, (uint32_t)(half ^ 1)) : 0u;
        for (int t = first; t < units; t += stride) {
            const int tile = tile_begin + (pair ? 2 * t + half : t);
            m0 = (tile / num_n) * BM;
            n0 = (tile % num_n) * BN;
            if (k_end > k_begin) {
                int prev = 0;
                for (int k = k_begin; k < k_end; ++k) {
                    mbar_wait(full_bar + 8 * s, phase);
                    const uint64_t da = smem_desc(smem_a + s * G::A_BYTES + cw * 64 * 128);
                    const uint64_t db = smem_desc(smem_b + s * G::B_BYTES);
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK / 16; ++kk)    // +32 B along K = +2 in the descriptor
                        wgmma_m64n128k16(acc, da + 2 * kk, db + 2 * kk, (k > k_begin || kk > 0) ? 1u : 0u);
                    wgmma_commit();
                    // Keep one k-step in flight; the previous one has now retired, so free its stage.
                    wgmma_wait<1>();
                    fence_acc(acc);
                    if (k > k_begin && lane == 0) {
                        mbar_arrive(empty_bar + 8 * prev);
                        if (pair) mbar_arrive_cluster(peer_empty + 8 * prev);
                    }
                    prev = s;
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
                wgmma_wait<0>();
                fence_acc(acc);
                if (lane == 0) {
                    mbar_arrive(empty_bar + 8 * prev);
                    if (pair) mbar_arrive_cluster(peer_empty + 8 * prev);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 64; ++i) acc[i] = 0.f;  // an empty K slice adds nothing
            }

            const int lrow = cw * 64 + warp * 16 + lane / 4;   // tile-local row of d[4j + 0..1]
            const int lcol = 2 * (lane & 3);                   // tile-local column of d[4j + 0] for j = 0
            if (!split) {
                // Direct epilogue: packed into 16 B pieces, bounds-checked.
                uint4 piece[BN / 32][2];
                pack_pieces(acc, piece, lane & 3);
                store_pieces<1>(C, piece, m0 + lrow, n0 + 8 * (lane & 3), M, N, 0, 1);
            } else {
                write_partial<BN>(partial, acc, lrow, lcol);   // the whole tile; edges are cut at the store
            }
        }
        if (split)
            reduce_partials_store<BM, BN, 128 * CW>(partial_s, rank, splits, (int)threadIdx.x - 128, C, m0, n0, M, N);
    }
    if (pair) cluster_sync_release_acquire();   // the peer's last arrivals and loads into this CTA have landed
}

// ---------------- host side ----------------

struct Plan {
    int head_tiles = 0;     // tiles [0, head_tiles) by the first launch
    int head_splits = 1;    // its split (1: persistent over head_grid CTAs)
    int head_grid = 0;
    int tail_tiles = 0;     // tiles [head_tiles, head_tiles + tail_tiles) by a second launch, split tail_splits
    int tail_splits = 1;
    bool pair = false;      // the head launch (persistent, all tiles) in multicast pairs
    double cost = 1e300;
};

template <int CW, int STAGES>
struct Path {
    using G = Cfg<CW, STAGES>;

    static void* kernel() { return reinterpret_cast<void*>(gemm_narrow_kernel<CW, STAGES>); }

    static ClusterFit& fit() {
        static ClusterFit clusters{kernel(), G::THREADS, G::SMEM_BYTES};
        return clusters;
    }

    // The largest split in [1, most] whose `tiles` clusters all fit at once (1 if none bigger does).
    static int fit_split(int dev, int sms, int tiles, int most) { return fit().split(dev, sms, tiles, most); }

    // Whether a persistent launch of all `tiles` over `grid` CTAs can run in multicast pairs (see the kernel): an
    // even split of tiles sharing their A rows, every pair resident at once.
    static bool pairs(int dev, int sms, int tiles, int num_n, int grid) {
        return PAIRS && tiles % 2 == 0 && num_n % 2 == 0 && grid % 2 == 0 && grid / 2 <= fit().capacity(dev, sms, 2);
    }

    static Plan plan(int dev, int sms, int M, int N, int K, double step, double red) {
        Plan p;
        const int tiles = ((M + G::BM - 1) / G::BM) * ((N + BN - 1) / BN);
        const int k_iters = (K + BK - 1) / BK;
        int most = k_iters / MIN_K_ITERS;
        if (most > MAX_SPLITS) most = MAX_SPLITS;
        if (most < 1) most = 1;
        const double dram = dram_clk(M, N, K);
        double cost;
        if (tiles < sms) {
            p.head_tiles = tiles;
            p.head_splits = fit_split(dev, sms, tiles, most);
            p.head_grid = p.head_splits > 1 ? tiles * p.head_splits : tiles;
            cost = ((k_iters + p.head_splits - 1) / p.head_splits) * step + (p.head_splits > 1 ? red : 0.0);
        } else {
            const int waves = tiles / sms, rem = tiles % sms;
            p.head_grid = sms;
            const int ts = (rem > 0 && k_iters >= MIN_TAIL_K_ITERS) ? fit_split(dev, sms, rem, most) : 1;
            if (ts > 1) {
                p.head_tiles = waves * sms;
                p.tail_tiles = rem;
                p.tail_splits = ts;
                cost = waves * k_iters * step + ((k_iters + ts - 1) / ts) * step + red + LAUNCH_CLK;
            } else {
                p.head_tiles = tiles;
                cost = (waves + (rem > 0 ? 1 : 0)) * k_iters * step;
            }
        }
        const int num_n = (N + BN - 1) / BN;
        // Past half the SMs the plain kernel's operand delivery from L2 slows it; a pair saves its share of the
        // operand bytes (BM / 2 of BM + BN rows) in proportion. Pairs run only past two thirds of the SMs: below
        // that they measured slower than the plain launch (H100, MEASUREMENTS.md, twenty-ninth session).
        const double over = p.head_grid > sms / 2 ? (double)(p.head_grid - sms / 2) / (sms - sms / 2) : 0.0;
        if (p.tail_tiles > 0) cost *= 1.0 + HEAD_SLOW * over;   // the head of a split tail: never in pairs
        const double pair_cost = cost * (1.0 - G::BM / 2.0 / (G::BM + BN) * over);
        p.pair = p.head_splits == 1 && p.tail_tiles == 0 && 3 * p.head_grid > 2 * sms &&
                 pairs(dev, sms, tiles, num_n, p.head_grid);
        if (p.pair) cost = pair_cost;
        p.cost = cost > dram ? cost : dram;
        return p;
    }

    static cudaError_t launch_one(const CUtensorMap& ta, const CUtensorMap& tb, __nv_bfloat16* C, int M, int N,
                                  int K, int tile_begin, int tiles, int splits, int grid, bool pair,
                                  cudaStream_t stream) {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3((unsigned)grid, 1, 1);
        config.blockDim = dim3(G::THREADS, 1, 1);
        config.dynamicSmemBytes = G::SMEM_BYTES;
        config.stream = stream;
        cudaLaunchAttribute attribute;
        set_cluster(config, attribute, pair ? 2 : splits);
        return cudaLaunchKernelEx(&config, gemm_narrow_kernel<CW, STAGES>, ta, tb, C, M, N, K, tile_begin, tiles,
                                  splits, pair);
    }

    static cudaError_t run(const Plan& p, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M,
                           int N, int K, cudaStream_t stream) {
        const int a_rows = p.pair ? G::BM / 2 : G::BM;   // a pair loads half of each A tile
        CUtensorMap ta, tb;
        if (!encode_kmajor(&ta, A, M, K, a_rows) || !encode_kmajor(&tb, B, N, K, BN)) return cudaErrorInvalidValue;
        cudaError_t err = launch_one(ta, tb, C, M, N, K, 0, p.head_tiles, p.head_splits, p.head_grid, p.pair, stream);
        if (err != cudaSuccess || p.tail_tiles == 0) return err;
        return launch_one(ta, tb, C, M, N, K, p.head_tiles, p.tail_tiles, p.tail_splits,
                          p.tail_tiles * p.tail_splits, false, stream);
    }
};

using PathA = Path<1, 8>;   // BM = 64,  8 stages: 1 KB + 192 KB ring + 128 B + 32 KB partial = 230,528 B
using PathB = Path<2, 5>;   // BM = 128, 5 stages: 1 KB + 160 KB ring + 128 B + 64 KB partial = 230,528 B

}  // namespace narrow

// The cheaper BN = 128 plan for M rows and its tile height (tall: BM = 128).
struct NarrowChoice {
    narrow::Plan plan;
    bool tall;
};

NarrowChoice narrow_choice(int dev, int sms, int M, int N, int K) {
    const narrow::Plan a = narrow::PathA::plan(dev, sms, M, N, K, STEP_CLK_A, RED_CLK_A);
    const narrow::Plan b = narrow::PathB::plan(dev, sms, M, N, K, STEP_CLK_B, RED_CLK_B);
    return b.cost < a.cost ? NarrowChoice{b, true} : NarrowChoice{a, false};
}

enum Kernel : int { NARROW, LARGE, WIDE };

// One launcher call's rows [row0, row0 + rows) as one GEMM, by one kernel.
struct Part {
    int row0 = 0, rows = 0;
    Kernel kernel = NARROW;
    NarrowChoice narrow{};
    double cost = 1e300;
};

// The cheaper kernel for rows [row0, row0 + rows). `single`: only plans of one launch (a part after a head).
Part price(int dev, int sms, int row0, int rows, int N, int K, const void* workspace, size_t workspace_bytes,
           bool single) {
    Part p;
    p.row0 = row0;
    p.rows = rows;
    p.narrow = narrow_choice(dev, sms, rows, N, K);
    if (!single || p.narrow.plan.tail_tiles == 0) p.cost = p.narrow.plan.cost;
    // At N <= 256 a 256-wide tile would waste MMA work and B traffic the model does not see. A tie (both at the
    // DRAM floor) goes to the large kernel, but for a split of every tile: the BN = 128 kernel measured faster than its
    // cluster split there (the chained split is unmeasured against it: kept to the measured side).
    if (N > 256) {
        const large::Plan q = large::plan(dev, rows, N, K, sms, workspace, workspace_bytes);
        if (q.cost < p.cost || (q.cost == p.cost && (q.reduce == large::NONE || q.reduce == large::SLABS))) {
            p.kernel = LARGE;
            p.cost = q.cost;
        }
        const double w = wide::cost(rows, N, K, sms);
        if (w < p.cost) {
            p.kernel = WIDE;
            p.cost = w;
        }
    }
    return p;
}

cudaError_t run(int dev, const Part& p, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int N,
                int K, void* workspace, size_t workspace_bytes, int sms, cudaStream_t stream) {
    A += (size_t)p.row0 * K;
    C += (size_t)p.row0 * N;
    if (p.kernel == LARGE) return large::launch(dev, A, B, C, p.rows, N, K, workspace, workspace_bytes, sms, stream);
    if (p.kernel == WIDE) return wide::launch(A, B, C, p.rows, N, K, sms, stream);
    return p.narrow.tall ? narrow::PathB::run(p.narrow.plan, A, B, C, p.rows, N, K, stream)
                         : narrow::PathA::run(p.narrow.plan, A, B, C, p.rows, N, K, stream);
}

// The launcher's choice for one call: the whole of C by one kernel (head.rows == 0), or a head of whole 128-row
// large tiles (no split-K) that leaves the ragged last wave's rows to a second launch of either kernel (`rest`, each
// part priced alone).
struct Schedule {
    Part head, rest;
};

Schedule schedule(int dev, int sms, int M, int N, int K, const void* workspace, size_t workspace_bytes) {
    Schedule best{Part{}, price(dev, sms, 0, M, N, K, workspace, workspace_bytes, false)};
    double best_cost = best.rest.cost;
    for (int h = large::BM; N > 256 && h < M; h += large::BM) {
        const Part r = price(dev, sms, h, M - h, N, K, workspace, workspace_bytes, true);
        const double c = large::cost(dev, h, N, K, sms, nullptr, 0) + LAUNCH_CLK + r.cost;
        if (c < best_cost) {
            best_cost = c;
            best = Schedule{Part{0, h, LARGE}, r};
        }
    }
    return best;
}

// The device, its SM count, and the kernels' shared-memory sizes (the occupancy queries behind the cluster plans need
// them set first).
cudaError_t prepare(int& dev, int& sms) {
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    if (sms < 1) sms = 1;
    err = cudaFuncSetAttribute(large::gemm_bf16_tn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)large::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(wide::gemm_wide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)wide::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(narrow::PathA::kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)narrow::PathA::G::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    return cudaFuncSetAttribute(narrow::PathB::kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)narrow::PathB::G::SMEM_BYTES);
}

}  // namespace

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N,
                                     int K, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    // TMA needs 16 B aligned bases and row strides (K % 8); the 16 B stores of C need N % 8 == 0 and C 16 B aligned.
    if (M <= 0 || N <= 0 || K <= 0 || N % 8 != 0 || K % 8 != 0 || !A || !B || !C ||
        (reinterpret_cast<uintptr_t>(A) & 15) || (reinterpret_cast<uintptr_t>(B) & 15) ||
        (reinterpret_cast<uintptr_t>(C) & 15))
        return cudaErrorInvalidValue;
    int dev = 0, sms = 0;
    cudaError_t err = prepare(dev, sms);
    if (err != cudaSuccess) return err;
    const Schedule s = schedule(dev, sms, M, N, K, workspace, workspace_bytes);
    if (s.head.rows > 0) {
        err = run(dev, s.head, A, B, C, N, K, nullptr, 0, sms, stream);
        if (err != cudaSuccess) return err;
    }
    return run(dev, s.rest, A, B, C, N, K, workspace, workspace_bytes, sms, stream);
}
