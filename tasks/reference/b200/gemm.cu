// Reference GEMM for B200 (sm_100a): C[M,N] = A[M,K] * B[N,K]^T, bf16 in/out, fp32 accumulate.
//
// NOT RUN ON HARDWARE: built and disassembled only (no B200 was available). The bit layouts it relies on
// are spelled out next to the code that builds them.
//
// Structure (128 x BN output tiles, BN = 256 or 128, K-block 64; 192 threads, one CTA per SM):
//   warp 4, lane 0 : TMA producer. A tile [128 x 64] and B tile [BN x 64], 128B-swizzled, into a ring of
//                    STAGES shared-memory stages; each stage completes on its full barrier (expect_tx).
//   warp 5, lane 0 : MMA issuer. Waits for a full stage, issues 4 x tcgen05.mma (128 x BN x 16) into an fp32
//                    accumulator in Tensor Memory, then tcgen05.commit -> the stage's empty barrier. After a
//                    tile's last K-block, tcgen05.commit -> that accumulator's acc_full barrier.
//                    Warp 5 also allocates the TMEM columns once per CTA and frees them at the end.
//   warps 0-3      : epilogue. Warp w may only touch TMEM lanes 32w..32w+31 (= tile rows), so thread
//                    (w, lane) owns row 32w+lane: tcgen05.ld 32x32b.x32 (32 fp32 columns), convert to bf16,
//                    16-byte stores masked on M and N (split launches: see below, 8-byte stores).
// Out-of-bounds rows/columns of A and B (ragged M, K not a multiple of 64) are zero-filled by TMA.
//
// Persistent schedule (every launch that is not a cluster split): grid = min(tiles, SMs), CTA b takes tiles b,
// b + grid, ... in a grouped order (bands of RASTER_GROUP = 16 m-tiles, m fastest inside a band, as in the
// H100 reference's large kernel: the CTAs at work share A and B tiles in L2). All three roles walk the same
// tiles; the ring's stage index and phase run on across tiles, so the producer streams the next tile's
// K-blocks while the MMA warp finishes the current one. The accumulator is double-buffered in TMEM (2 x BN
// columns, 512 at BN = 256): a CTA's tile j goes to buffer b = j % 2, so the MMA warp computes tile j + 1 into
// one buffer while the epilogue warps drain tile j from the other, and tile j's stores run under tile j + 1's
// main loop (the Blackwell form of the H100 kernel's held-register stores). Per buffer:
//   acc_full[b]  (count 1): tcgen05.commit by the MMA warp after the tile's last MMA; the epilogue waits on it.
//   acc_empty[b] (count 4): lane 0 of each epilogue warp arrives once the warp's tcgen05.ld of the tile have
//                completed (wait::ld), after tcgen05.fence::before_thread_sync and __syncwarp. The MMA warp
//                waits on it, then fence::after_thread_sync, before the tile's first MMA, which starts the
//                buffer afresh (accumulate = 0).
// Each buffer serves every second tile, so tile j waits on parity (j / 2) & 1 of acc_full (the phase tile j
// completes) and on the flipped parity of acc_empty (the phase the epilogue completed on tile j - 2; a fresh
// barrier passes at once). Neither barrier can get a phase ahead of its waiter: each side waits on the other.
//
// Split-K for small tile counts (the H100 reference's cluster scheme, carried over): when 128x128 tiles
// fill fewer CTAs than there are SMs (small M and/or N <= 256, e.g. N = 128 K = 2048 or N = 256 K = 7168
// at M <= 2379), the launcher picks S = the largest split (<= 8, >= 4 K-blocks per slice) whose tiles x S
// CTAs fit in one wave (tiles x S <= SMs and tiles <= cudaOccupancyMaxActiveClusters for a cluster of S),
// and launches tiles x S CTAs with cudaLaunchKernelEx and a (S, 1, 1) cluster dimension: cluster c takes
// tile c, its CTA of rank r the K-blocks [r * kb / S, (r + 1) * kb / S). The epilogue warps then read the
// fp32 accumulator out of TMEM as above but write it into this CTA's own shared memory (the TMA ring,
// free once the last MMA has completed: see the kernel), barrier.cluster arrive.release / wait.acquire,
// each CTA sums a 1/S share of the tile's float4 chunks over all S CTAs' shared memory (mapa +
// ld.shared::cluster, rank order 0..S-1: deterministic), rounds to bf16 in registers, passes a second
// (exit) cluster barrier so no CTA leaves while a peer still reads its shared memory, and only then
// stores C. One kernel, no workspace, no memset, no global atomics. Shapes whose tiles already fill the
// GPU (tiles >= SMs), or that no split >= 2 fits, take the persistent launch. Split launches use the same
// kernel (template flag SPLIT): one tile per CTA, one BN-column accumulator.
//
// Chained split (the H100 reference large kernel's, carried over): clusters are placed whole inside a GPC, so fewer
// clusters of S fit than SMs / S. Where more slices pay than fit as clusters (priced by chain_splits; e.g. 42 tiles
// at M = 232, N = 5376, where 42 clusters of 3 did not fit on an H100), the same SPLIT kernel runs tiles x S CTAs
// with no cluster: CTA b takes slice b % S of tile b / S. Each writes its partial tile into its ring as above, then,
// 32-row block by block, waits (ld.acquire.gpu) until the block's counter reads its slice q, adds the running sum of
// slices 0..q-1 and passes it on (red.release.gpu), the last slice storing C: a fixed order, deterministic. The
// running sum is kept as fp32 bit halves, the high halves in the tile's own C (where the last slice's results go),
// the low halves in the workspace, so that it and the counters fit the task's 4 * M * N bytes; cudaMemsetAsync
// zeroes the counters. Slice q waits only on lower slices, on lower-numbered CTAs, all resident (tiles x S <= SMs).
//
// Tail split (the H100 reference large kernel's, carried over; `workspace` as slabs and counters): when the
// persistent launch's tiles fill at least one wave but leave a ragged last one (tiles >= SMs, rem =
// tiles % SMs > 0, e.g. M = 901-972 at N = 5376: 168 tiles = 148 + 20), the same launch runs the whole waves
// of whole tiles, then cuts each of the rem last tiles into S K-slices on otherwise idle SMs (rem x S <= SMs,
// >= MIN_K_BLOCKS K-blocks a slice, S <= MAX_SPLITS); the persistent CTAs then walk units (whole tiles, then
// slices: unit_of), not tiles. Slices but the last store their fp32 accumulator (read out of TMEM as above)
// into a slab of the workspace, __threadfence, meet at a named barrier of the 4 epilogue warps, and one thread
// adds 1 (red.release.gpu) to the tile's counter; the last slice waits (ld.acquire.gpu) for S - 1, adds the
// slabs in slab order 0..S-2 (deterministic), and stores the bf16 tile. cudaMemsetAsync zeroes the counters
// first (the workspace is garbage on entry). Workspace: counters (rem x 4 B, rounded up to 256 B), then
// rem x (S - 1) slabs of BM x BN fp32; tail only with a 16-B aligned workspace that holds them (the task gives
// 4 * M * N bytes). Each CTA runs at most one slice, after all of its whole tiles, so nothing waits on a CTA
// that is itself waiting (unit_of says why). The launcher prices S with datasheet-rate guesses (TAIL_*,
// tail_splits): not fitted, no B200 has run this file.
//
// Multicast pairs (the H100 reference's BN = 128 kernel's, carried over): a persistent launch of whole tiles only
// (no tail split) on more than two thirds of the SMs, with an even count of m-tiles, runs in clusters of two. Cluster
// c takes tile pairs (2p, 2p + 1) for p = c, c + grid / 2, ..., its rank r tile 2p + r: in the grouped order (bands
// of an even count of m-tiles, m fastest) the two tiles are neighbours in m and share their B tile. Rank r loads B
// rows [r BN / 2, (r + 1) BN / 2) of it into both CTAs' stage with one multicast TMA (tmB's box is BN / 2 rows), so
// L2 serves a third (BN 256) or a quarter (BN 128) fewer bytes per product. The full barrier still expects the whole
// stage (its A, its half of B, the peer's half); each empty barrier counts both CTAs' MMA warps (one
// tcgen05.commit multicast to both), so neither producer refills a stage the other is still reading. Cluster
// barriers follow the barriers' init and precede the exit, after each producer has seen its last stages freed.
// On an H100 the pairs made 128 CTAs of 128x128 tiles at N 2048, K 4096 run 1.35x faster (MEASUREMENTS.md,
// twenty-ninth session); that the same holds here is a guess.
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
constexpr int MAX_SPLITS = 8;         // portable cluster size; also the most K-slices of a tail tile
constexpr int MAX_CHAIN = 16;         // the most K-slices of a chained tile
constexpr int MIN_K_BLOCKS = 4;       // least K-blocks per split-K slice
constexpr int MAX_DEVICES = 64;       // cluster-capacity cache entries
constexpr bool PAIRS = true;          // multicast pairs where they apply (see the header)
// Tail-split pricing (see tail_splits), SM clocks. Guesses from datasheet rates, NOT fitted: no B200 has run this
// file. The form is the H100 reference's large-kernel model; its fitted constants are not reused because a B200
// SM does twice the tensor work per clock while a slab through L2 costs about the same.
constexpr double TAIL_MMA_FLOP_PER_CLK = 8192.0;    // dense bf16 per SM: ~2.25 PFLOP/s / 148 SMs / ~1.85 GHz
constexpr double TAIL_SLAB_BYTES_PER_CLK = 64.0;    // one SM's slab stores or loads through L2
constexpr double TAIL_MEMSET_CLK = 2000.0;          // the counters' memset node (the H100 model's LAUNCH_CLK)
constexpr double TAIL_DRAM_BYTES_PER_CLK = 4000.0;  // ~8 TB/s / ~1.9 GHz: a launch below this floor is not split
// Chained-split pricing (see chain_splits): the H100 model's fitted per-slice costs (9000 clk a chain link and 2000 a
// cluster slice, for a 128 KB tile) halved for the 64 KB tile of a split launch here. Guesses, NOT fitted.
constexpr double CHAIN_SLICE_CLK = 4500.0;
constexpr double CLUSTER_SLICE_CLK = 1000.0;
constexpr int CHAIN_BLOCKS = BM / 32;               // 32-row blocks of a chained tile, a counter each

template <int BN>
struct Cfg {
    static_assert(BN == 128 || BN == 256, "UMMA N must be a multiple of 16 in [16, 256]; TMEM cols a power of 2");
    static constexpr int A_BYTES = BM * BK * 2;            // 16 KiB, a multiple of 1024 (swizzle atom)
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int STAGES = PIPE_BYTES / STAGE_BYTES; // 4 (BN 256) or 6 (BN 128)
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // + slack to align the ring to 1024 B
    // Split-K: the fp32 partial tile lives at the start of the ring (see the kernel); it must fit there.
    static constexpr int PARTIAL_BYTES = BM * BN * 4;      // 64 KiB (BN 128) or 128 KiB (BN 256)
    static_assert(PARTIAL_BYTES <= STAGES * STAGE_BYTES, "partial tile must fit in the TMA ring");
    // Tail split: one slice's fp32 tile in the workspace, in float4s (see slab_index).
    static constexpr int SLAB_F4 = BM * BN / 4;
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
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
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

// The same into CTA-relative address `dst` of every CTA in `mask`, each completing on its own barrier at `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar,
                                                      uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
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

// The same arrival on the barrier at `bar` in every CTA of `mask`.
__device__ __forceinline__ void umma_commit_multicast(uint32_t bar, uint16_t mask) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
                 :: "r"(bar), "h"(mask) : "memory");
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

// ---- clusters (split-K) ----
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
// Every thread of every CTA of the cluster arrives, then waits. Not .aligned: lanes of warps 4/5 diverge.
// release/acquire: this thread's shared-memory writes (and DSMEM reads) before the arrive are ordered before
// every cluster thread's accesses after its wait.
__device__ __forceinline__ void cluster_sync_release_acquire() {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}
// Execution only: for the TMA and MMA warps, which publish nothing and read no peer's shared memory.
__device__ __forceinline__ void cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;" ::: "memory");
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

// Partial tile layout (split-K): float4 chunk (r, ch) of the 128 x BN fp32 tile (columns 4ch..4ch+3) at
// chunk index r * (BN / 4) + (ch ^ (r & 7)). Rows are 512 B or 1 KiB apart (same banks), so the XOR spreads
// the 8 rows that one 8-lane phase of a warp's 16-byte store touches (lanes = consecutive rows) over all 32
// banks; consecutive chunks of one row, as the reduction reads them, stay a permutation of each other.
template <int BN>
__device__ __forceinline__ int partial_chunk(int r, int ch) { return r * (BN / 4) + (ch ^ (r & 7)); }

// Grouped tile order: bands of RASTER_GROUP m-tiles, m fastest inside a band, so the CTAs working at one time
// share B tiles (and A tiles) in L2.
template <int BN>
__device__ __forceinline__ void tile_origin(int t, int tiles_m, int tiles_n, int& m0, int& n0) {
    const int per_band = RASTER_GROUP * tiles_n;
    const int band = t / per_band;
    const int first_m = band * RASTER_GROUP;
    const int band_m = min(tiles_m - first_m, RASTER_GROUP);
    const int r = t - band * per_band;
    m0 = (first_m + r % band_m) * BM;
    n0 = (r / band_m) * BN;
}

// One CTA's unit of work: a whole tile (slice < 0), or K-slice `slice` of `splits` of a tile, K-blocks
// [kb_begin, kb_end) (never empty: splits <= num_kb / MIN_K_BLOCKS).
struct Unit {
    int tile, slice, kb_begin, kb_end;
};
__host__ __device__ __forceinline__ Unit slice_unit(int tile, int slice, int splits, int num_kb) {
    return {tile, slice, slice * num_kb / splits, (slice + 1) * num_kb / splits};
}
// Persistent launch, tail split: units [0, whole) are the whole tiles, then unit whole + v is slice v % splits of
// tile whole + v / splits (the slices of a tile adjacent, the last one last). The launcher sets whole = waves * grid
// and rem * splits <= grid (grid = SMs), and CTA b walks units b, b + grid, ...: `waves` whole tiles, then unit
// whole + b if b < rem * splits. So every CTA runs at most one slice, after all of its whole tiles, and a slice
// that waits (the last of its tile) waits only on CTAs whose one slice is not a last one, i.e. that never wait:
// no cycle. Those CTAs also have the lower block indices (b = (tile - whole) * splits + slice). Without a tail:
// whole = tiles, splits = 1, unit u = tile u.
__host__ __device__ __forceinline__ Unit unit_of(int u, int whole, int splits, int num_kb) {
    if (u < whole) return {u, -1, 0, num_kb};
    const int v = u - whole;
    return slice_unit(whole + v / splits, v % splits, splits, num_kb);
}

// ---- tail split: slabs and counters in global memory ----
// Slab layout (per slice): float4 (r, g) = tile row r, columns 4g..4g+3 at g * BM + r. Epilogue thread (w, lane)
// owns row r = 32w + lane, so each 16-byte store or load of a warp covers 512 contiguous bytes, and the last slice's
// thread reads back exactly the float4s that the same thread of the other slices wrote.
__device__ __forceinline__ int slab_index(int r, int g) { return g * BM + r; }

// The 4 epilogue warps (threads 0..127) meet; the TMA and MMA warps take no part (named barrier 1;
// __syncthreads is barrier 0).
__device__ __forceinline__ void epilogue_sync() { asm volatile("bar.sync 1, 128;" ::: "memory"); }
__device__ __forceinline__ void red_release_add(unsigned* counter, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(counter), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* counter) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    return v;
}

// ---- chained split: the running sum in C and the workspace ----
// Passes 32-row block `blk` of K-slice `slice` of a chained tile on (see the header), by the 128 epilogue threads
// (`et`) once slices 0..slice-1 have passed it: the slice's partial tile (in `partial`, partial_chunk layout) plus the
// running sum of slices 0..slice-1, stored as the next running sum or, by the last slice, as C. The running sum
// (rows < M, columns < N) is held as fp32 bit halves: the high halves in C, the low halves in `low` (row-major
// M x N). Every load of the block is issued before any is used: one L2 round trip, not one per chunk.
template <int BN>
__device__ __forceinline__ void chain_link(const float4* partial, int et, int blk, int slice, int splits,
                                           __nv_bfloat16* C, uint16_t* low, int m0, int n0, int M, int N) {
    constexpr int CPR = BN / 4, ITERS = 32 * CPR / 128;   // float4 chunks per row; per thread in a block
    uint2 h[ITERS], l[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {   // chunk q: row q / CPR, columns 4 * (q % CPR) .. + 3
        const int q = blk * 32 * CPR + et + 128 * i, r = q / CPR, col = 4 * (q % CPR);
        const size_t at = size_t(m0 + r) * N + n0 + col;   // 8 B aligned: N % 8 == 0, col % 4 == 0
        h[i] = l[i] = make_uint2(0u, 0u);
        if (slice > 0 && m0 + r < M && n0 + col < N) {     // N % 8 == 0: a chunk is wholly inside N or outside
            h[i] = __ldcg(reinterpret_cast<const uint2*>(C + at));
            l[i] = __ldcg(reinterpret_cast<const uint2*>(low + at));
        }
    }
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const int q = blk * 32 * CPR + et + 128 * i, r = q / CPR, col = 4 * (q % CPR);
        if (m0 + r >= M || n0 + col >= N) continue;
        const size_t at = size_t(m0 + r) * N + n0 + col;
        float4 v = partial[partial_chunk<BN>(r, q % CPR)];
        v.x += __uint_as_float(__byte_perm(l[i].x, h[i].x, 0x5410));   // zero halves: +0.0f
        v.y += __uint_as_float(__byte_perm(l[i].x, h[i].x, 0x7632));
        v.z += __uint_as_float(__byte_perm(l[i].y, h[i].y, 0x5410));
        v.w += __uint_as_float(__byte_perm(l[i].y, h[i].y, 0x7632));
        const uint32_t x = __float_as_uint(v.x), y = __float_as_uint(v.y);
        const uint32_t z = __float_as_uint(v.z), w = __float_as_uint(v.w);
        uint2* const hi = reinterpret_cast<uint2*>(C + at);
        if (slice == splits - 1) {
            *hi = make_uint2(pack_bf16x2(x, y), pack_bf16x2(z, w));
            continue;
        }
        __stcg(hi, make_uint2(__byte_perm(x, y, 0x7632), __byte_perm(z, w, 0x7632)));
        __stcg(reinterpret_cast<uint2*>(low + at), make_uint2(__byte_perm(x, y, 0x5410), __byte_perm(z, w, 0x5410)));
    }
}

// SPLIT == false: ordinary launch, persistent: CTA b takes units b, b + gridDim.x, ... (unit_of), the
//                 accumulator double-buffered in TMEM. No tail: whole = tiles, splits = 1 (slabs and counters
//                 unused). Tail split: whole = waves * gridDim.x, the tiles after it cut into `splits` K-slices,
//                 reduced through `slabs` and `counters` (zeroed before the launch).
// SPLIT == true:  gridDim.x == tiles * splits, CTA b takes tile b / splits and its K-slice of rank r = b % splits,
//                 the K-blocks [r * num_kb / splits, (r + 1) * num_kb / splits) (never empty: the launcher keeps
//                 splits <= num_kb / MIN_K_BLOCKS), one accumulator; whole unused. Summed across a cluster launch of
//                 (splits, 1, 1) (chain false: b / splits is the cluster, r its rank; work, counters unused) or by a
//                 chain (chain true: the low halves in `work`, counters zeroed before the launch).
// paired (SPLIT == false, whole == tiles, splits == 1): launched in clusters of two, cluster c taking tile pairs
//                 c, c + gridDim.x / 2, ... (see the header); tmB's box is BN / 2 rows.
template <int BN, bool SPLIT>
__global__ void __launch_bounds__(NUM_THREADS, 1)
gemm_tcgen05_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                    __nv_bfloat16* __restrict__ C, void* __restrict__ work, unsigned* __restrict__ counters,
                    int M, int N, int K, int whole, int splits, bool chain, bool paired) {
    using Cf = Cfg<BN>;
    constexpr int STAGES = Cf::STAGES;
    constexpr int ACC_BUFS = SPLIT ? 1 : 2;
    constexpr uint32_t TMEM_COLS = ACC_BUFS * BN;   // 512 or 256 (persistent), 256 or 128 (split): powers of 2

    __shared__ __align__(8) uint64_t full_bar[STAGES];       // TMA bytes landed
    __shared__ __align__(8) uint64_t empty_bar[STAGES];      // MMAs reading the stage finished
    __shared__ __align__(8) uint64_t acc_full[ACC_BUFS];     // a tile's accumulator complete in TMEM buffer b
    __shared__ __align__(8) uint64_t acc_empty[ACC_BUFS];    // the epilogue has read TMEM buffer b out
    __shared__ uint32_t tmem_slot;
    extern __shared__ uint8_t dyn_smem[];
    // 128B swizzle (TMA and the MMA descriptor alike) assumes 1024-B aligned atoms.
    const uint32_t ring = (smem_u32(dyn_smem) + 1023u) & ~1023u;

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;

    float4* const slabs = static_cast<float4*>(work);   // a tail split's
    const int rank = SPLIT ? (chain ? int(blockIdx.x) % splits : int(cluster_ctarank())) : 0;
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const bool pair = !SPLIT && paired;                    // folds away in the split kernels
    const int half = pair ? int(cluster_ctarank()) : 0;   // a pair: this CTA's tile of two, its half of B
    // Split: unit u = tile u, of which this CTA takes exactly one and the K-slice `rank`. A pair: unit u = tile pair u.
    const int units = SPLIT ? tiles : pair ? tiles / 2 : whole + (tiles - whole) * splits;
    const int first = SPLIT ? (chain ? int(blockIdx.x) / splits : int(cluster_id_x()))
                            : pair ? int(cluster_id_x()) : int(blockIdx.x);
    const int stride = SPLIT ? tiles : pair ? int(gridDim.x) / 2 : int(gridDim.x);
    const int num_kb = (K + BK - 1) / BK;
    // All three roles derive the same unit sequence from this.
    auto unit = [&](int u) {
        return SPLIT ? slice_unit(u, rank, splits, num_kb) : unit_of(pair ? 2 * u + half : u, whole, splits, num_kb);
    };

    if (warp == 4 && lane == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmA)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmB)) : "memory");
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_u32(&full_bar[s]), 1);
            mbar_init(smem_u32(&empty_bar[s]), pair ? 2 : 1);   // a pair: both CTAs' MMA warps
        }
        for (int b = 0; b < ACC_BUFS; ++b) {
            mbar_init(smem_u32(&acc_full[b]), 1);    // one tcgen05.commit per tile
            mbar_init(smem_u32(&acc_empty[b]), 4);   // lane 0 of each epilogue warp, once per tile
        }
        // Make the initialised barriers visible to the async proxy (TMA, tcgen05.commit).
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (warp == 5) tmem_alloc(smem_u32(&tmem_slot), TMEM_COLS);   // whole warp: .sync.aligned
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    // A pair: the peer's barriers initialised before anything reaches them (fence.mbarrier_init above releases them).
    if (pair) cluster_sync_relaxed();
    const uint32_t tmem_base = tmem_slot;   // lane 0, first allocated column

    // Each role walks the same units (a whole tile or a K-slice of one); `j` counts this CTA's units. The ring's
    // stage s and phase run on across units; unit j uses accumulator buffer b = j % ACC_BUFS for the
    // (j / ACC_BUFS)-th time, so it waits on acc_full[b] with parity (j / ACC_BUFS) & 1 and on acc_empty[b] with
    // the flipped parity (the previous use).
    if (warp == 4) {
        if (lane == 0) {
            int s = 0;
            uint32_t phase = 0;
            for (int u = first; u < units; u += stride) {
                const Unit w = unit(u);
                int m0, n0;
                tile_origin<BN>(w.tile, tiles_m, tiles_n, m0, n0);
                for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
                    mbar_wait(smem_u32(&empty_bar[s]), phase ^ 1);   // first pass returns at once
                    const uint32_t fb = smem_u32(&full_bar[s]);
                    const uint32_t sa = ring + s * Cf::STAGE_BYTES;
                    // The full box is counted even where TMA zero-fills out-of-bounds elements.
                    mbar_expect_tx(fb, Cf::STAGE_BYTES);
                    tma_load_2d(sa, &tmA, kb * BK, m0, fb);
                    if (pair)   // this CTA's half of the shared B tile, into both CTAs' stage
                        tma_load_2d_multicast(sa + Cf::A_BYTES + half * (Cf::B_BYTES / 2), &tmB, kb * BK,
                                              n0 + half * (BN / 2), fb, 0x3);
                    else
                        tma_load_2d(sa + Cf::A_BYTES, &tmB, kb * BK, n0, fb);
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
            // A pair: every stage's last fill freed by both MMA warps, so that no arrival from the peer is still on
            // its way to this CTA's barriers when it leaves.
            for (int i = 0; pair && i < STAGES; ++i) {
                mbar_wait(smem_u32(&empty_bar[s]), phase ^ 1);
                if (++s == STAGES) { s = 0; phase ^= 1; }
            }
        }
        __syncwarp();
        // Both cluster barriers of the reduction count every thread of the cluster.
        if (SPLIT && !chain) { cluster_sync_relaxed(); cluster_sync_relaxed(); }
    } else if (warp == 5) {
        if (lane == 0) {
            int s = 0;
            uint32_t phase = 0;
            for (int u = first, j = 0; u < units; u += stride, ++j) {
                const Unit w = unit(u);
                const int b = j % ACC_BUFS;
                // Buffer b free: the epilogue has read out the unit before last (a fresh barrier passes at once).
                mbar_wait(smem_u32(&acc_empty[b]), ((j / ACC_BUFS) & 1) ^ 1);
                tc_fence_after();
                const uint32_t d = tmem_base + uint32_t(b * BN);
                const int kb_begin = w.kb_begin;
                for (int kb = kb_begin; kb < w.kb_end; ++kb) {
                    mbar_wait(smem_u32(&full_bar[s]), phase);
                    tc_fence_after();
                    const uint32_t sa = ring + s * Cf::STAGE_BYTES;
                    const uint64_t da = sw128_kmajor_desc(sa);
                    const uint64_t db = sw128_kmajor_desc(sa + Cf::A_BYTES);
#pragma unroll
                    for (int k = 0; k < BK / UMMA_K; ++k)   // +32 B per K step = +2 in the address field
                        umma_bf16(d, da + 2 * k, db + 2 * k, Cf::IDESC, (kb > kb_begin || k > 0) ? 1u : 0u);
                    if (pair)   // the stage holds half of the peer's B too: free it in both CTAs
                        umma_commit_multicast(smem_u32(&empty_bar[s]), 0x3);
                    else
                        umma_commit(smem_u32(&empty_bar[s]));
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
                umma_commit(smem_u32(&acc_full[b]));   // arrives once every MMA of this unit has completed
            }
        }
        __syncwarp();
        if (SPLIT && !chain) { cluster_sync_relaxed(); cluster_sync_relaxed(); }
    } else {
        const int lrow = warp * 32 + lane;                  // tile-local row
        for (int u = first, j = 0; u < units; u += stride, ++j) {
            const Unit w = unit(u);
            const int b = j % ACC_BUFS;
            int m0, n0;
            tile_origin<BN>(w.tile, tiles_m, tiles_n, m0, n0);
            mbar_wait(smem_u32(&acc_full[b]), (j / ACC_BUFS) & 1);
            __syncwarp();   // tcgen05.ld is .sync.aligned
            tc_fence_after();
            const int row = m0 + lrow;
            const uint32_t trow = tmem_base + (uint32_t(warp * 32) << 16) + uint32_t(b * BN);
            if constexpr (!SPLIT) {
                // Tail split: tail tile t = w.tile - whole has slabs t * (splits - 1) + q, q < splits - 1 (slice
                // q's), and counter counters[t]. Rows >= M and 32-column chunks at or past N are neither written nor
                // read: writer and reader threads own the same rows and skip the same chunks.
                const int t = w.tile - whole;   // meaningful for slices only
                if (w.slice >= 0 && w.slice < splits - 1) {
                    // Not the last slice: the fp32 accumulator into slab w.slice (L2 only: the last slice reads it
                    // on another SM), then count this slice in.
                    float4* const mine = slabs + (size_t(t) * (splits - 1) + w.slice) * Cf::SLAB_F4;
                    for (int c = 0; c < BN; c += 32) {
                        if (n0 + c >= N) break;   // warp-uniform
                        uint32_t v[32];
                        tmem_ld_32x32b_x32(trow + c, v);
                        if (row < M) {
#pragma unroll
                            for (int q = 0; q < 8; ++q)
                                __stcg(mine + slab_index(lrow, c / 4 + q),
                                       make_float4(__uint_as_float(v[4 * q + 0]), __uint_as_float(v[4 * q + 1]),
                                                   __uint_as_float(v[4 * q + 2]), __uint_as_float(v[4 * q + 3])));
                        }
                    }
                    tc_fence_before();
                    __syncwarp();
                    if (lane == 0) mbar_arrive(smem_u32(&acc_empty[b]));
                    // Each thread's slab stores are ordered before the barrier, the barrier before thread 0's
                    // release: the last slice, acquiring the count, sees all 128 threads' stores.
                    __threadfence();
                    epilogue_sync();
                    if (threadIdx.x == 0) red_release_add(counters + t, 1u);
                    continue;   // a slice is this CTA's last unit
                }
                if (w.slice >= 0) {
                    // The last slice: wait until the other splits - 1 have counted themselves in (they never wait
                    // themselves: see unit_of). One thread spins; the barrier carries its acquire to the others.
                    if (threadIdx.x == 0)
                        while (ld_acquire(counters + t) != unsigned(splits - 1)) __nanosleep(100);
                    epilogue_sync();
                }
                // Stores of this tile run while the MMA warp fills the other buffer with the next tile.
                for (int c = 0; c < BN; c += 32) {
                    if (n0 + c >= N) break;   // warp-uniform
                    uint32_t v[32];
                    tmem_ld_32x32b_x32(trow + c, v);
                    if (row < M) {
                        // The last slice adds the other slices' accumulators, slab 0 first (fixed order:
                        // deterministic).
                        for (int p = 0; w.slice >= 0 && p < splits - 1; ++p) {
                            const float4* const src = slabs + (size_t(t) * (splits - 1) + p) * Cf::SLAB_F4;
                            float4 a[8];
#pragma unroll
                            for (int q = 0; q < 8; ++q) a[q] = __ldcg(src + slab_index(lrow, c / 4 + q));
#pragma unroll
                            for (int q = 0; q < 8; ++q) {
                                v[4 * q + 0] = __float_as_uint(__uint_as_float(v[4 * q + 0]) + a[q].x);
                                v[4 * q + 1] = __float_as_uint(__uint_as_float(v[4 * q + 1]) + a[q].y);
                                v[4 * q + 2] = __float_as_uint(__uint_as_float(v[4 * q + 2]) + a[q].z);
                                v[4 * q + 3] = __float_as_uint(__uint_as_float(v[4 * q + 3]) + a[q].w);
                            }
                        }
                        __nv_bfloat16* dst = C + size_t(row) * N + n0 + c;
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            // N % 8 == 0, so each 8-column chunk is either wholly inside or wholly outside.
                            if (n0 + c + 8 * q < N) {
                                uint4 pk;
                                pk.x = pack_bf16x2(v[8 * q + 0], v[8 * q + 1]);
                                pk.y = pack_bf16x2(v[8 * q + 2], v[8 * q + 3]);
                                pk.z = pack_bf16x2(v[8 * q + 4], v[8 * q + 5]);
                                pk.w = pack_bf16x2(v[8 * q + 6], v[8 * q + 7]);
                                *reinterpret_cast<uint4*>(dst + 8 * q) = pk;
                            }
                        }
                    }
                }
                // Every tcgen05.ld of this warp has completed (wait::ld): hand buffer b back to the MMA warp.
                tc_fence_before();
                __syncwarp();
                if (lane == 0) mbar_arrive(smem_u32(&acc_empty[b]));
            } else {
                // The partial tile reuses the start of the TMA ring. That memory is free here: this CTA's
                // producer issued exactly w.kb_end - w.kb_begin stage loads, the MMA warp waited on the full barrier
                // of every one of them (so no TMA write into the ring is still in flight), and acc_full is
                // signalled by a tcgen05.commit issued after the last MMA, i.e. once every MMA, and with it every
                // tensor-core read of the ring, has completed. The proxy fence below orders those async-proxy
                // accesses, observed through the mbarrier, before this thread's generic-proxy writes (belt and
                // braces: the mbarrier wait already orders them). The barriers are static shared memory, outside
                // the ring, so the trailing empty-barrier commits touch nothing the partial overwrites.
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                float4* const partial = reinterpret_cast<float4*>(dyn_smem + (ring - smem_u32(dyn_smem)));
                // The whole tile, out-of-bounds rows and columns included (they are zeros: TMA zero-filled A and
                // B there); the stores after the reduction cut them off.
                for (int c = 0; c < BN; c += 32) {
                    uint32_t v[32];
                    tmem_ld_32x32b_x32(trow + c, v);
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        partial[partial_chunk<BN>(lrow, c / 4 + j)] =
                            make_float4(__uint_as_float(v[4 * j + 0]), __uint_as_float(v[4 * j + 1]),
                                        __uint_as_float(v[4 * j + 2]), __uint_as_float(v[4 * j + 3]));
                }
                if (chain) {   // block by block: wait for slices 0..rank-1, add, pass on (one thread counts)
                    unsigned* const count = counters + size_t(w.tile) * CHAIN_BLOCKS;
                    epilogue_sync();   // the whole partial tile written
                    for (int blk = 0; blk < CHAIN_BLOCKS; ++blk) {
                        if (rank > 0) {
                            if (threadIdx.x == 0)
                                while (ld_acquire(count + blk) != unsigned(rank)) __nanosleep(32);
                            epilogue_sync();
                        }
                        chain_link<BN>(partial, int(threadIdx.x), blk, rank, splits, C, static_cast<uint16_t*>(work),
                                       m0, n0, M, N);
                        if (rank < splits - 1) {   // publish: stores, fence, barrier, then count
                            __threadfence();
                            epilogue_sync();
                            if (threadIdx.x == 0) red_release_add(count + blk, 1u);
                        }
                    }
                    break;
                }
                cluster_sync_release_acquire();   // every CTA's partial tile is complete and visible cluster-wide

                // This CTA sums the chunks [rank * total / splits, (rank + 1) * total / splits) of the tile (chunk
                // q: row q / (BN / 4), columns 4 * (q % (BN / 4)) .. + 3) over ranks 0..splits-1 in rank order,
                // and keeps the bf16 results in registers: C is stored only after the exit barrier, so that
                // barrier's release has no global stores to wait for.
                constexpr int CPR = BN / 4;                      // chunks per row
                constexpr int TOTAL = BM * CPR;
                constexpr int ET = 128;                          // epilogue threads
                constexpr int ITERS = (TOTAL / 2 + ET - 1) / ET; // splits >= 2: at most TOTAL / 2 chunks per rank
                const int q_begin = rank * TOTAL / splits, q_end = (rank + 1) * TOTAL / splits;
                const int et = int(threadIdx.x);                 // warps 0-3: threads 0..127
                const uint32_t partial_s = ring;
                uint32_t src[MAX_SPLITS];
#pragma unroll
                for (int p = 0; p < MAX_SPLITS; ++p) src[p] = p < splits ? map_rank(partial_s, uint32_t(p)) : 0u;
                // BATCH chunks' loads (BATCH x splits DSMEM reads) are issued before any is summed, so the
                // reduction pays ITERS / BATCH round trips of DSMEM latency rather than ITERS.
                constexpr int BATCH = 2;
                static_assert(ITERS % BATCH == 0, "ITERS must be a multiple of BATCH");
                uint2 packed[ITERS];
#pragma unroll
                for (int it0 = 0; it0 < ITERS; it0 += BATCH) {
                    float4 v[BATCH][MAX_SPLITS];
#pragma unroll
                    for (int b = 0; b < BATCH; ++b) {
                        const int q = q_begin + et + (it0 + b) * ET;
                        if (q < q_end) {
                            const uint32_t off = uint32_t(partial_chunk<BN>(q / CPR, q % CPR)) * 16u;
#pragma unroll
                            for (int p = 0; p < MAX_SPLITS; ++p)
                                if (p < splits) v[b][p] = ld_cluster_f4(src[p] + off);
                        }
                    }
#pragma unroll
                    for (int b = 0; b < BATCH; ++b) {
                        const int q = q_begin + et + (it0 + b) * ET;
                        packed[it0 + b] = make_uint2(0u, 0u);
                        if (q < q_end) {
                            float4 sum = v[b][0];
#pragma unroll
                            for (int p = 1; p < MAX_SPLITS; ++p)
                                if (p < splits) {
                                    sum.x += v[b][p].x;
                                    sum.y += v[b][p].y;
                                    sum.z += v[b][p].z;
                                    sum.w += v[b][p].w;
                                }
                            packed[it0 + b] = make_uint2(pack_bf16x2(__float_as_uint(sum.x), __float_as_uint(sum.y)),
                                                         pack_bf16x2(__float_as_uint(sum.z), __float_as_uint(sum.w)));
                        }
                    }
                }
                // Exit barrier: no CTA leaves (or lets its ring be reused) while a peer may still read its shared
                // memory (release: this thread's DSMEM loads are ordered before its arrival).
                cluster_sync_release_acquire();
#pragma unroll
                for (int it = 0; it < ITERS; ++it) {
                    const int q = q_begin + et + it * ET;
                    const int gr = m0 + q / CPR, gc = n0 + (q % CPR) * 4;
                    // N % 8 == 0 and gc % 4 == 0: gc + 3 < N too; C 16-B aligned: the 8-byte store is aligned.
                    if (q < q_end && gr < M && gc < N)
                        *reinterpret_cast<uint2*>(C + size_t(gr) * N + gc) = packed[it];
                }
                break;   // one tile per split CTA (stride = tiles ends the loop too; this lets ptxas see it)
            }
        }
    }

    if (pair) cluster_sync_relaxed();   // neither CTA leaves before the peer's producer has drained its barriers
    // All TMEM reads done before the allocating warp frees the columns.
    tc_fence_before();
    __syncthreads();
    if (warp == 5) {
        tc_fence_after();
        tmem_dealloc(tmem_base, TMEM_COLS);
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

// A launch of gemm_tcgen05_kernel<BN, ...> in clusters of `cluster` CTAs along x (the attribute lives beside the
// config that points at it).
template <int BN>
struct ClusterLaunch {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attribute[1];
    ClusterLaunch(unsigned grid, int cluster, cudaStream_t stream) {
        config.gridDim = dim3(grid, 1, 1);
        config.blockDim = dim3(NUM_THREADS, 1, 1);
        config.dynamicSmemBytes = Cfg<BN>::SMEM_BYTES;
        config.stream = stream;
        attribute[0].id = cudaLaunchAttributeClusterDimension;
        attribute[0].val.clusterDim.x = unsigned(cluster);
        attribute[0].val.clusterDim.y = 1;
        attribute[0].val.clusterDim.z = 1;
        config.attrs = attribute;
        config.numAttrs = 1;
    }
    ClusterLaunch(const ClusterLaunch&) = delete;   // config.attrs points into this object
};

// Clusters of `s` CTAs of gemm_tcgen05_kernel<BN, SPLIT> resident at once, cached per device; a failed query is
// replaced by sms / s (the hardware would then run any excess in a later wave: slower, never wrong).
// Needs the kernel's dynamic shared memory attribute set first.
template <int BN, bool SPLIT>
int cluster_capacity(int dev, int sms, int s) {
    static int cache[MAX_DEVICES][MAX_SPLITS + 1] = {};
    int* slot = (dev >= 0 && dev < MAX_DEVICES) ? &cache[dev][s] : nullptr;
    if (slot && *slot > 0) return *slot;
    ClusterLaunch<BN> clustered(s, s, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, gemm_tcgen05_kernel<BN, SPLIT>, &clustered.config) != cudaSuccess ||
        clusters <= 0) {
        cudaGetLastError();   // clear the failed query's error
        clusters = sms / s;
    }
    if (clusters < 1) clusters = 1;
    if (slot) *slot = clusters;
    return clusters;
}

// The workspace a tail of `rem` tiles cut `splits` ways needs: counters (rounded up to 256 B), then the slabs.
template <int BN>
size_t tail_bytes(long long rem, long long splits) {
    return (size_t(rem) * sizeof(unsigned) + 255) / 256 * 256 +
           size_t(rem) * size_t(splits - 1) * Cfg<BN>::PARTIAL_BYTES;
}

// The tail split's S for a persistent launch of BN-wide tiles (1: none). Only with a ragged last wave after at least
// one whole one, a 16-B aligned workspace that holds the slabs, and rem x S <= SMs. Price (SM clocks; the H100
// large kernel's form, B200 guesses: see TAIL_*), one K-block of a tile = STEP = 2 BM BN BK / TAIL_MMA_FLOP_PER_CLK:
//   whole tiles only : (waves + 1) * kb * STEP
//   tail split S     : (waves * kb + ceil(kb / S)) * STEP + S * SLAB + TAIL_MEMSET_CLK
// SLAB = one slab through L2 at TAIL_SLAB_BYTES_PER_CLK; the last slice's critical path after its K-blocks holds
// about S of them (the others' stores, in parallel, then its S - 1 loads). The cheapest S wins, if cheaper than
// whole tiles, and never for a launch under the DRAM floor (A, B and C moved once): there the tail is hidden.
template <int BN>
int tail_splits(int M, int N, int K, int sms, const void* workspace, size_t workspace_bytes) {
    const long long tiles = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    const long long waves = tiles / sms, rem = tiles % sms, kb = (K + BK - 1) / BK;
    if (waves < 1 || rem == 0 || !workspace || (reinterpret_cast<uintptr_t>(workspace) & 15)) return 1;
    const double step = 2.0 * BM * BN * BK / TAIL_MMA_FLOP_PER_CLK;
    const double slab = Cfg<BN>::PARTIAL_BYTES / TAIL_SLAB_BYTES_PER_CLK;
    const double dram = 2.0 * (double(M) * K + double(N) * K + double(M) * N) / TAIL_DRAM_BYTES_PER_CLK;
    double best = double(waves + 1) * kb * step;
    if (best <= dram) return 1;
    int splits = 1;
    for (long long s = 2; s <= MAX_SPLITS && s * MIN_K_BLOCKS <= kb && rem * s <= sms &&
                          tail_bytes<BN>(rem, s) <= workspace_bytes; ++s) {
        const double c = double(waves * kb + (kb + s - 1) / s) * step + s * slab + TAIL_MEMSET_CLK;
        if (c < best) { best = c; splits = int(s); }
    }
    return splits;
}

// The workspace a chained split needs: the running sum's low halves (M x N u16, rounded up to 256 B), then the
// counters.
size_t chain_bytes(int M, int N, long long tiles) {
    return (size_t(M) * N * sizeof(uint16_t) + 255) / 256 * 256 + size_t(tiles) * CHAIN_BLOCKS * sizeof(unsigned);
}

// The chained split's S (1: none) for `tiles` BN-wide tiles whose cluster split takes `cluster` slices (1: none
// fits): the cheapest S in (cluster, MAX_CHAIN] with tiles x S <= SMs and >= MIN_K_BLOCKS K-blocks a slice, if
// cheaper than the cluster split and a 16-B aligned workspace holds the low halves and the counters. Price (SM
// clocks, the H100 large kernel's form; guesses, see CHAIN_SLICE_CLK), a slice's K-blocks at STEP (as in
// tail_splits) each, plus S x CLUSTER_SLICE_CLK for a cluster split or S x CHAIN_SLICE_CLK + TAIL_MEMSET_CLK for a
// chain.
template <int BN>
int chain_splits(int M, int N, long long tiles, int cluster, int K, int sms, const void* workspace,
                 size_t workspace_bytes) {
    if (!workspace || (reinterpret_cast<uintptr_t>(workspace) & 15) || chain_bytes(M, N, tiles) > workspace_bytes)
        return 1;
    const long long kb = (K + BK - 1) / BK;
    const double step = 2.0 * BM * BN * BK / TAIL_MMA_FLOP_PER_CLK;
    double best = double((kb + cluster - 1) / cluster) * step + (cluster > 1 ? cluster * CLUSTER_SLICE_CLK : 0.0);
    int splits = 1;
    for (long long s = cluster + 1; s <= MAX_CHAIN && s * MIN_K_BLOCKS <= kb && tiles * s <= sms; ++s) {
        const double c = double((kb + s - 1) / s) * step + s * CHAIN_SLICE_CLK + TAIL_MEMSET_CLK;
        if (c < best) { best = c; splits = int(s); }
    }
    return splits;
}

template <int BN>
cudaError_t launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                   void* workspace, size_t workspace_bytes, int dev, int sms, cudaStream_t stream) {
    CUtensorMap tmA, tmB;
    if (!encode_kmajor(&tmA, A, M, K, BM) || !encode_kmajor(&tmB, B, N, K, BN)) return cudaErrorInvalidValue;
    const long long tiles = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    // Split-K only while the tiles leave SMs idle: the largest S in [2, most] whose tiles x S CTAs fit in one
    // wave, as clusters of S, or a chain of more slices where that pays; S = 1 (the persistent launch) otherwise.
    int splits = 1, chained = 1;
    if (tiles < sms) {
        cudaError_t err = cudaFuncSetAttribute(gemm_tcgen05_kernel<BN, true>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<BN>::SMEM_BYTES);
        if (err != cudaSuccess) return err;
        int most = (K + BK - 1) / BK / MIN_K_BLOCKS;   // >= MIN_K_BLOCKS K-blocks per slice: none is empty
        if (most > MAX_SPLITS) most = MAX_SPLITS;
        for (int s = most; s >= 2; --s)
            if (tiles * s <= sms && tiles <= cluster_capacity<BN, true>(dev, sms, s)) { splits = s; break; }
        chained = chain_splits<BN>(M, N, tiles, splits, K, sms, workspace, workspace_bytes);
    }
    if (chained > 1) {   // the low halves first, the counters from the next 256 B
        unsigned* const counters = reinterpret_cast<unsigned*>(static_cast<char*>(workspace) + chain_bytes(M, N, 0));
        cudaError_t err = cudaMemsetAsync(counters, 0, size_t(tiles) * CHAIN_BLOCKS * sizeof(unsigned), stream);
        if (err != cudaSuccess) return err;
        gemm_tcgen05_kernel<BN, true><<<unsigned(tiles * chained), NUM_THREADS, Cfg<BN>::SMEM_BYTES, stream>>>(
            tmA, tmB, C, workspace, counters, M, N, K, 0, chained, true, false);
        return cudaGetLastError();
    }
    if (splits == 1) {
        cudaError_t err = cudaFuncSetAttribute(gemm_tcgen05_kernel<BN, false>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<BN>::SMEM_BYTES);
        if (err != cudaSuccess) return err;
        // Tail split (tiles >= SMs only): whole = waves * SMs whole tiles, then rem x tail slice units.
        const int tail = tiles < sms ? 1 : tail_splits<BN>(M, N, K, sms, workspace, workspace_bytes);
        const long long rem = tail > 1 ? tiles % sms : 0, whole = tiles - rem, units = whole + rem * tail;
        float4* slabs = nullptr;
        unsigned* counters = nullptr;
        if (tail > 1) {   // counters first, the slabs from the next 256 B
            counters = static_cast<unsigned*>(workspace);
            slabs = reinterpret_cast<float4*>(static_cast<char*>(workspace) + tail_bytes<BN>(rem, 1));
            err = cudaMemsetAsync(counters, 0, size_t(rem) * sizeof(unsigned), stream);
            if (err != cudaSuccess) return err;
        }
        // Persistent: at most one CTA per SM. With a tail, units >= whole >= SMs: grid = SMs, as unit_of assumes.
        const unsigned grid = unsigned(units < sms ? units : sms);
        // Multicast pairs (see the header): whole tiles only, the pairs' tiles in one band column (an even count of
        // m-tiles), past two thirds of the SMs (as on the H100), every cluster resident at once.
        const bool pair = PAIRS && tail == 1 && tiles % 2 == 0 && ((M + BM - 1) / BM) % 2 == 0 && grid % 2 == 0 &&
                          3 * grid > 2 * unsigned(sms) && int(grid / 2) <= cluster_capacity<BN, false>(dev, sms, 2);
        if (!pair) {
            gemm_tcgen05_kernel<BN, false><<<grid, NUM_THREADS, Cfg<BN>::SMEM_BYTES, stream>>>(
                tmA, tmB, C, slabs, counters, M, N, K, int(whole), tail, false, false);
            return cudaGetLastError();
        }
        if (!encode_kmajor(&tmB, B, N, K, BN / 2)) return cudaErrorInvalidValue;   // a pair loads half of each B tile
        ClusterLaunch<BN> paired(grid, 2, stream);
        return cudaLaunchKernelEx(&paired.config, gemm_tcgen05_kernel<BN, false>, tmA, tmB, C, (void*)nullptr,
                                  (unsigned*)nullptr, M, N, K, int(whole), 1, false, true);
    }
    ClusterLaunch<BN> clustered(unsigned(tiles * splits), splits, stream);
    return cudaLaunchKernelEx(&clustered.config, gemm_tcgen05_kernel<BN, true>, tmA, tmB, C, (void*)nullptr,
                              (unsigned*)nullptr, M, N, K, 0, splits, false, false);
}

}  // namespace

extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                     int M, int N, int K, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
    if (M <= 0 || N <= 0 || K <= 0 || K % 8 != 0 || N % 8 != 0) return cudaErrorInvalidValue;
    // TMA needs 16-B aligned bases (row pitch K*2 is a multiple of 16); the epilogue stores 16 B.
    if ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) | reinterpret_cast<uintptr_t>(C)) & 15)
        return cudaErrorInvalidValue;
    int dev = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    if (sms < 1) sms = 1;
    // 128x256 tiles when they fill the GPU at least once, else 128x128 (small N or small M), split-K across a
    // cluster when even those leave SMs idle.
    const long tiles256 = long((M + BM - 1) / BM) * long((N + 255) / 256);
    return tiles256 >= sms ? launch<256>(A, B, C, M, N, K, workspace, workspace_bytes, dev, sms, stream)
                           : launch<128>(A, B, C, M, N, K, workspace, workspace_bytes, dev, sms, stream);
}
