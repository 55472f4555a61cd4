// Reference attention forward for B200 (sm_100a): O = softmax(Q·Kᵀ·scale [causal])·V and the natural-log
// LSE, Q/K/V/O [B, H, S, D] bf16, LSE [B, H, S] fp32, D in {64, 96, 128, 256}, any S.
//
// NOT RUN ON HARDWARE: built and disassembled only (no B200 was available). The bit layouts it relies on
// are spelled out next to the code that builds them.
//
// Design (FlashAttention-4 style; a unit of work is a (b·h, group of Q_TILES 128-row query tiles) pair):
//   Two schedules of one kernel (the PERSISTENT flag; the launcher picks): one CTA per unit, or one CTA per SM
//   taking units from a counter in the workspace (the TMA warp claims the next unit once it has issued the current
//   one's last load), so that the next unit's Q and first blocks load, and its first S products run, while the
//   softmax warpgroups finish the current one. Unit u is head u % BH of query group u / BH, causal groups from the
//   last (the most keys) down: all heads' longest units first, in either schedule. TMEM is allocated once per CTA.
//   warp TMA, lane 0 : loads each unit's Q tiles once, then K and V blocks of 128 keys into a ring of SLOTS
//                      shared-memory slots, in the order the MMA warp first needs them.
//   warp MMA, lane 0 : S = Q·Kᵀ (tcgen05.mma, both operands in smem) into TMEM; O += P·V with P read from
//                      TMEM (the ".kind::f16 [d], [a], b_desc" form) and V from smem, O restarting (accumulate
//                      0) at each unit's first PV. Also owns TMEM.
//   softmax warpgroups (one per Q tile; warp w owns TMEM lanes 32(w%4)..+31 = tile rows, one row a thread):
//                      tcgen05.ld the S row into registers, mask, online softmax in base 2 (exp2 after
//                      folding scale·log2(e)), write P as bf16 over the first half of the S columns with
//                      tcgen05.st, then signal the MMA warp. The O rescale is lazy (FA4): the running max
//                      only moves when it grows by more than 2^8, so O in TMEM is rarely touched; l and O
//                      always refer to the same max, so the final O/l and LSE are exact.
//   D <= 128: two Q tiles ping-pong (tile 1's softmax overlaps tile 0's MMAs and back), one S buffer each.
//   D == 256: one Q tile (TMEM is full), two S buffers so S(j+1) is computed while block j's softmax runs.
//
// Synchronisation (mbarriers): q_full (TMA tx; a persistent CTA's end marker: an arrival, nothing loaded),
// q_empty (persistent: a commit after the unit's last S MMA, then Q may be reloaded, and an arrival from every
// softmax warp once it has read the unit's slot, then the slot may be rewritten), kv_full/kv_empty per slot
// (TMA tx / tcgen05.commit), s_full[b] (commit after an S MMA into S buffer b), p_full[b] (128 softmax arrivals:
// P and any O rescale are in TMEM), o_done[b] (commit after each PV that read its P from buffer b; the softmax
// waits on it only before rescaling O and for the epilogue). The counts run on over a persistent CTA's units:
// the TMA warp counts its units, the MMA warp and each softmax warpgroup their units and their blocks (block g
// of the CTA uses buffer g % 2 at D 256), so a unit's phases follow on from the last one's.
// Every wait is for the phase in progress or the one just completed, never for one two phases on (the same
// parity), so parity is unambiguous:
//   - the phase after the awaited one needs the waiter to go on first: kv slots, Q and the unit slot alternate fill
//     and release, each waiting for the other; the next S into buffer b (and so the next P) is issued only after
//     the PV that waited for this P; the next PV from buffer b waits for the softmax's next P;
//   - the phase before it is complete: each waiter waits for every phase in turn, except the softmax on o_done[b],
//     where the earlier phase's PV was issued before an S that the softmax has already waited for.
//   Nothing resets between units, and the MMA warp issues a unit's work only after all of the last one's, so
//   this holds across units as within one.
// Ordering assumptions: tcgen05.mma instructions issued by one thread execute in issue order, so an S MMA
// issued after the PV that reads P from the same TMEM columns does not overwrite P early (as FA4 relies on),
// and a thread's tcgen05.commit arrivals happen in issue order.
//
// Shared memory (1024-B aligned; every tile is a stack of TMA boxes [64 columns x rows], 128B-swizzled):
//   Q tile t : D_PAD/64 boxes of [64 x 128 rows] (16 KiB each); K or V slot: D_PAD/64 boxes of [64 x 128 keys].
//   D = 96 is padded to 128: the tensor map's width is 96, TMA zero-fills columns 96..127 (S skips them;
//   the PV product runs at N = 128 and its last 32 columns stay zero).
// Tensor memory (512 columns x 128 lanes of 32 bit; tile row r = lane r):
//   S buffer b: columns [128b, 128b+128), fp32; P (bf16, two per column) overwrites its first 64 columns.
//   O of tile t: columns [256 + t·D_PAD, +D_PAD), fp32.
// Descriptors (sm100 smem descriptor: start>>4 [0,14), LBO>>4 [16,30), SBO>>4 [32,46), version 1 at 46,
// base offset 0, swizzle 2 = 128B at [61,64)):
//   K-major (Q and K for S = Q·Kᵀ; K = head dim): rows of 128 B, SBO = 1024 B per 8-row group, LBO unused;
//     the k-th 16-column step is +32 B inside a box, a new box every 4 steps.
//   MN-major (V for O += P·V; K = keys, N = head dim contiguous): LBO = stride between 64-column boxes
//     (128 keys x 128 B = 16 KiB), SBO = 1024 B per 8 keys; the k-th 16-key step is +2048 B.
// Instruction descriptors: see idesc() below.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int BM = 128;   // rows of a Q tile = TMEM lanes
constexpr int BN = 128;   // keys per K/V block
constexpr int UMMA_K = 16;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float RESCALE_LOG2 = 8.0f;   // rescale O only when the row max grows by more than 2^8
constexpr int RING_BYTES = 128 * 1024;
// setmaxnreg targets with two Q tiles: 2 x 208 + 88 <= 3 x 168, the registers the 12 warps launch with.
constexpr uint32_t PRODUCER_REGS = 88;
constexpr uint32_t SOFTMAX_REGS = 208;

template <int D>
struct Cfg {
    static_assert(D == 64 || D == 96 || D == 128 || D == 256, "head dims of the task");
    static constexpr int D_PAD = D == 96 ? 128 : D;
    static constexpr int BOXES = D_PAD / 64;
    static constexpr int Q_TILES = D_PAD <= 128 ? 2 : 1;
    static constexpr int SOFTMAX_WARPS = 4 * Q_TILES;
    static constexpr int TMA_WARP = SOFTMAX_WARPS;
    static constexpr int MMA_WARP = SOFTMAX_WARPS + 1;
    // Two Q tiles: a whole producer warpgroup (TMA, MMA, two idle warps), so setmaxnreg can move registers
    // from it to the softmax warpgroups (12 warps launch with 168 each). One tile: 6 warps, no spills as is.
    static constexpr int PRODUCER_WARPS = Q_TILES == 2 ? 4 : 2;
    static constexpr int THREADS = 32 * (SOFTMAX_WARPS + PRODUCER_WARPS);
    static constexpr int Q_TILE_BYTES = BM * D_PAD * 2;
    static constexpr int KV_BYTES = BN * D_PAD * 2;
    static constexpr int SLOTS = RING_BYTES / KV_BYTES;   // 8 (D 64), 4 (D 96/128), 2 (D 256)
    static constexpr int SMEM_BYTES = Q_TILES * Q_TILE_BYTES + SLOTS * KV_BYTES + 1024;
    static constexpr uint32_t S_COL = 0;                  // S buffer b at S_COL + 128 b
    static constexpr uint32_t O_COL = 256;                // O of tile t at O_COL + t D_PAD
    static_assert(O_COL + Q_TILES * D_PAD <= 512, "TMEM has 512 columns");
};

// Instruction descriptor for tcgen05.mma .kind::f16 (32 bits): [4,6) D format 1 = F32, [7,10) A format
// 1 = BF16, [10,13) B format 1 = BF16, [15] A major (0 = K), [16] B major (0 = K, 1 = MN),
// [17,23) N >> 3, [24,29) M >> 4; sparsity, saturate, negate and shift fields 0.
__host__ __device__ constexpr uint32_t idesc(int n, bool b_mn_major) {
    return (1u << 4) | (1u << 7) | (1u << 10) | (uint32_t(b_mn_major) << 16) | (uint32_t(n >> 3) << 17) |
           (uint32_t(BM >> 4) << 24);
}

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

// ---- TMA: box at (column c0, row c1, head c2) of a [BH, S, D] tensor ----
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

// ---- tcgen05 ----
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after()  { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// 128B-swizzled smem operand (layout conventions in the header comment).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr, uint32_t lbo_bytes) {
    return uint64_t((saddr & 0x3FFFFu) >> 4) | (uint64_t(lbo_bytes >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 46) | (uint64_t(2) << 61);
}
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t saddr) { return sw128_desc(saddr, 16); }
__device__ __forceinline__ uint64_t mnmajor_desc(uint32_t saddr) { return sw128_desc(saddr, BN * 128); }

// D[tmem] (+)= A[smem] · B[smem], issued by one thread.
__device__ __forceinline__ void umma_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t id,
                                        uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(id), "r"(accumulate) : "memory");
}
// D[tmem] (+)= A[tmem] · B[smem]: A is M x 16 bf16 at lanes 0..127, 8 columns (two bf16 per column).
__device__ __forceinline__ void umma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t id,
                                        uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "r"(a_tmem), "l"(b_desc), "r"(id), "r"(accumulate) : "memory");
}
// Arrives once on the mbarrier when all tcgen05 operations previously issued by this thread have completed.
__device__ __forceinline__ void umma_commit(uint32_t bar) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                 :: "r"(bar) : "memory");
}

__device__ __forceinline__ void tmem_alloc(uint32_t slot, uint32_t ncols) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                 :: "r"(slot), "r"(ncols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(taddr), "r"(ncols) : "memory");
}

// TMEM address: bits [31,16] lane, [15,0] column. Thread `lane` of the warp gets TMEM lane
// (taddr.lane + lane), 32 consecutive columns; the wait sits in the same asm so no use precedes the data.
__device__ __forceinline__ void tmem_ld32(uint32_t taddr, float* r) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.b32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];\n\t"
                 "tcgen05.wait::ld.sync.aligned;"
                 : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]), "=f"(r[4]), "=f"(r[5]), "=f"(r[6]),
                   "=f"(r[7]), "=f"(r[8]), "=f"(r[9]), "=f"(r[10]), "=f"(r[11]), "=f"(r[12]), "=f"(r[13]),
                   "=f"(r[14]), "=f"(r[15]), "=f"(r[16]), "=f"(r[17]), "=f"(r[18]), "=f"(r[19]), "=f"(r[20]),
                   "=f"(r[21]), "=f"(r[22]), "=f"(r[23]), "=f"(r[24]), "=f"(r[25]), "=f"(r[26]), "=f"(r[27]),
                   "=f"(r[28]), "=f"(r[29]), "=f"(r[30]), "=f"(r[31])
                 : "r"(taddr) : "memory");
}
__device__ __forceinline__ void tmem_st32(uint32_t taddr, const float (&v)[32]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], "
                 "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
                 "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};"
                 :: "r"(taddr),
                    "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "f"(v[4]), "f"(v[5]), "f"(v[6]), "f"(v[7]),
                    "f"(v[8]), "f"(v[9]), "f"(v[10]), "f"(v[11]), "f"(v[12]), "f"(v[13]), "f"(v[14]), "f"(v[15]),
                    "f"(v[16]), "f"(v[17]), "f"(v[18]), "f"(v[19]), "f"(v[20]), "f"(v[21]), "f"(v[22]), "f"(v[23]),
                    "f"(v[24]), "f"(v[25]), "f"(v[26]), "f"(v[27]), "f"(v[28]), "f"(v[29]), "f"(v[30]), "f"(v[31])
                 : "memory");
}
__device__ __forceinline__ void tmem_st16(uint32_t taddr, const uint32_t (&v)[16]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], "
                 "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16};"
                 :: "r"(taddr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]), "r"(v[4]), "r"(v[5]), "r"(v[6]),
                    "r"(v[7]), "r"(v[8]), "r"(v[9]), "r"(v[10]), "r"(v[11]), "r"(v[12]), "r"(v[13]), "r"(v[14]),
                    "r"(v[15])
                 : "memory");
}
__device__ __forceinline__ void tmem_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

// A ring position: slot index and the parity of its current use.
template <int N>
struct Ring {
    int slot = 0;
    uint32_t phase = 0;
    __device__ void advance() {
        if (++slot == N) {
            slot = 0;
            phase ^= 1;
        }
    }
};

// A persistent CTA's unit slot in the workspace ([unit counter][one slot per CTA]): the unit whose Q the TMA warp
// loads next (-1: none left). Written before q_full is armed, read after its wait, rewritten only once q_empty has
// completed (every reader has arrived). Global, not shared, memory: compute-sanitizer's racecheck does not follow
// the mbarrier ordering of plain shared-memory accesses.
__device__ __forceinline__ void put_slot(int* slot, int u) {
    asm volatile("st.global.u32 [%0], %1;" :: "l"(slot), "r"(u) : "memory");
}
__device__ __forceinline__ int get_slot(const int* slot) {
    int u;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(u) : "l"(slot) : "memory");
    return u;
}

// A unit of work: head bh, query rows [q0, q0 + Q_TILES·BM), key blocks [0, n_blocks).
struct Unit {
    int bh, q0, n_blocks;
};

template <int D, bool PERSISTENT>
__global__ void __launch_bounds__(Cfg<D>::THREADS, 1)
attention_fwd_tcgen05_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                             const __grid_constant__ CUtensorMap tmV, __nv_bfloat16* __restrict__ O,
                             float* __restrict__ LSE, int* __restrict__ work, int BH, int S, int causal,
                             float scale_log2) {
    using C = Cfg<D>;
    constexpr int QT = C::Q_TILES;

    __shared__ __align__(8) uint64_t q_full;
    __shared__ __align__(8) uint64_t q_empty;   // PERSISTENT only
    __shared__ __align__(8) uint64_t kv_full[C::SLOTS];
    __shared__ __align__(8) uint64_t kv_empty[C::SLOTS];
    __shared__ __align__(8) uint64_t s_full[2];
    __shared__ __align__(8) uint64_t p_full[2];
    __shared__ __align__(8) uint64_t o_done[2];
    __shared__ uint32_t tmem_slot;
    extern __shared__ uint8_t dyn_smem[];
    const uint32_t q_smem = (smem_u32(dyn_smem) + 1023u) & ~1023u;   // 128B swizzle atoms are 1024-B aligned
    const uint32_t kv_smem = q_smem + QT * C::Q_TILE_BYTES;

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int groups = (S + QT * BM - 1) / (QT * BM);
    // PERSISTENT: this CTA's slot, computed where used (held from here, it was spilled around setmaxnreg).
    auto slot = [&] { return work + 1 + blockIdx.x; };
    // Unit u: head u % BH, query group u / BH; without PERSISTENT the CTA's own, head blockIdx.x, group blockIdx.y
    // (the same order: x runs fastest). Causal: groups from the last, which has the most keys, to the first.
    auto unit_of = [&](int u) {
        const int g = PERSISTENT ? u / BH : int(blockIdx.y);
        const int q0 = (causal ? groups - 1 - g : g) * QT * BM;
        const int kv_end = causal ? min(S, q0 + QT * BM) : S;
        return Unit{PERSISTENT ? u % BH : int(blockIdx.x), q0, (kv_end + BN - 1) / BN};
    };
    // Block g of tile t, g counting the blocks of all the CTA's units so far: the S buffer (and o_done barrier) it
    // uses, and how many times that buffer was used before. At D 256 o_done goes by buffer too: with one barrier for
    // every PV, the epilogue's wait for the last PV could pass on the phase of the PV before it (the same parity
    // two phases back) while that one was still running.
    auto buffer = [](int t, int g) { return QT == 2 ? t : (g & 1); };
    auto use = [](int g) { return QT == 2 ? g : (g >> 1); };

    if (warp == C::TMA_WARP && lane == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmQ)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmK)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmV)) : "memory");
        mbar_init(smem_u32(&q_full), 1);
        if (PERSISTENT) mbar_init(smem_u32(&q_empty), 1 + C::SOFTMAX_WARPS);   // the MMA warp, every softmax warp
        for (int s = 0; s < C::SLOTS; ++s) {
            mbar_init(smem_u32(&kv_full[s]), 1);
            mbar_init(smem_u32(&kv_empty[s]), 1);
        }
        for (int b = 0; b < 2; ++b) {
            mbar_init(smem_u32(&s_full[b]), 1);
            mbar_init(smem_u32(&p_full[b]), 128);   // every thread of the softmax warpgroup
            mbar_init(smem_u32(&o_done[b]), 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (warp == C::MMA_WARP) tmem_alloc(smem_u32(&tmem_slot), 512);   // once per CTA, whatever its units
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const uint32_t tmem = tmem_slot;

    if (warp >= C::SOFTMAX_WARPS) {
        // setmaxnreg is .aligned per warpgroup: the whole producer warpgroup runs this one instruction.
        if constexpr (C::PRODUCER_WARPS == 4) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(PRODUCER_REGS));
        if (warp == C::TMA_WARP) {
            if (lane == 0) {
                const uint32_t qb = smem_u32(&q_full);
                Ring<C::SLOTS> ring;   // runs on across units, as the MMA warp's does
                int u = PERSISTENT ? int(blockIdx.x) : 0;
                for (int n = 0;; ++n) {
                    if (PERSISTENT) {
                        const int units = groups * BH;
                        mbar_wait(smem_u32(&q_empty), (n & 1) ^ 1);   // unit n-1 done with Q and its slot
                        put_slot(slot(), u < units ? u : -1);
                        if (u >= units) {
                            mbar_arrive(qb);   // the end marker: a phase of q_full with nothing loaded
                            break;
                        }
                    }
                    const Unit w = unit_of(u);
                    mbar_expect_tx(qb, QT * C::Q_TILE_BYTES);   // out-of-bounds parts of a box count too (zero-filled)
                    for (int t = 0; t < QT; ++t)
                        for (int b = 0; b < C::BOXES; ++b)
                            tma_load_3d(q_smem + t * C::Q_TILE_BYTES + b * BM * 128, &tmQ, b * 64, w.q0 + t * BM, w.bh,
                                        qb);
                    auto load = [&](const CUtensorMap* map, int j) {
                        mbar_wait(smem_u32(&kv_empty[ring.slot]), ring.phase ^ 1);   // the first pass returns at once
                        const uint32_t fb = smem_u32(&kv_full[ring.slot]);
                        const uint32_t dst = kv_smem + ring.slot * C::KV_BYTES;
                        mbar_expect_tx(fb, C::KV_BYTES);
                        for (int b = 0; b < C::BOXES; ++b)
                            tma_load_3d(dst + b * BN * 128, map, b * 64, j * BN, w.bh, fb);
                        ring.advance();
                    };
                    // The MMA warp's order of first use.
                    if (QT == 2) {
                        for (int j = 0; j < w.n_blocks; ++j) {
                            load(&tmK, j);
                            load(&tmV, j);
                        }
                    } else {
                        load(&tmK, 0);
                        if (w.n_blocks > 1) load(&tmK, 1);
                        for (int j = 0; j < w.n_blocks; ++j) {
                            load(&tmV, j);
                            if (j + 2 < w.n_blocks) load(&tmK, j + 2);
                        }
                    }
                    if (!PERSISTENT) break;
                    // Claimed once this unit's last load is issued: claimed earlier, a long causal unit's CTA would
                    // hold the next one while others ran dry. Its latency hides behind the wait on q_empty.
                    u = int(gridDim.x) + atomicAdd(work, 1);
                }
            }
            __syncwarp();
        } else if (warp == C::MMA_WARP) {
            if (lane == 0) {
                constexpr uint32_t ID_S = idesc(BN, false);        // S[128 x 128] = Q · Kᵀ
                constexpr uint32_t ID_O = idesc(C::D_PAD, true);   // O[128 x D] += P · V, V MN-major
                Ring<C::SLOTS> ring;
                int g0 = 0;         // blocks of the CTA's earlier units: block j of this unit is g0 + j
                int n_blocks = 0;   // of this unit
                auto acquire = [&]() {
                    const int s = ring.slot;
                    mbar_wait(smem_u32(&kv_full[s]), ring.phase);
                    tc_fence_after();
                    ring.advance();
                    return s;
                };
                auto release = [&](int s) { umma_commit(smem_u32(&kv_empty[s])); };
                auto mma_s = [&](int t, int kslot, int j) {
                    const int b = buffer(t, g0 + j);
                    const uint32_t qa = q_smem + t * C::Q_TILE_BYTES;
                    const uint32_t ka = kv_smem + kslot * C::KV_BYTES;
#pragma unroll
                    for (int k = 0; k < D / UMMA_K; ++k) {   // D = 96: the zero padding is skipped
                        const uint32_t off = (k / 4) * (BM * 128) + (k % 4) * 32;
                        umma_ss(tmem + C::S_COL + 128 * b, kmajor_desc(qa + off), kmajor_desc(ka + off), ID_S, k > 0);
                    }
                    umma_commit(smem_u32(&s_full[b]));
                    if (PERSISTENT && t == QT - 1 && j == n_blocks - 1)   // the unit's last read of Q
                        umma_commit(smem_u32(&q_empty));
                };
                auto mma_pv = [&](int t, int vslot, int j) {
                    const int b = buffer(t, g0 + j);
                    mbar_wait(smem_u32(&p_full[b]), use(g0 + j) & 1);
                    tc_fence_after();
                    const uint32_t va = kv_smem + vslot * C::KV_BYTES;
#pragma unroll
                    for (int k = 0; k < BN / UMMA_K; ++k)   // each unit's first PV (j = k = 0) starts O afresh
                        umma_ts(tmem + C::O_COL + t * C::D_PAD, tmem + C::S_COL + 128 * b + 8 * k,
                                mnmajor_desc(va + k * 2048), ID_O, (j | k) != 0);
                    umma_commit(smem_u32(&o_done[b]));
                };
                for (int n = 0;; ++n) {
                    mbar_wait(smem_u32(&q_full), n & 1);
                    int u = 0;
                    if (PERSISTENT && (u = get_slot(slot())) < 0) break;
                    tc_fence_after();
                    n_blocks = unit_of(u).n_blocks;
                    if (QT == 2) {
                        // S0(0) S1(0) | PV0(j) S0(j+1) PV1(j) S1(j+1) ...: one tile's softmax under the other's MMAs.
                        int k = acquire();
                        mma_s(0, k, 0);
                        mma_s(1, k, 0);
                        for (int j = 0; j < n_blocks; ++j) {
                            const int v = acquire();
                            release(k);   // after S1(j)
                            mma_pv(0, v, j);
                            const bool more = j + 1 < n_blocks;
                            if (more) {
                                k = acquire();
                                mma_s(0, k, j + 1);
                            }
                            mma_pv(1, v, j);
                            release(v);
                            if (more) mma_s(1, k, j + 1);
                        }
                    } else {
                        // S(0) S(1) | PV(j) S(j+2) ...: two S buffers keep the tensor core busy during the softmax.
                        for (int j = 0; j < 2 && j < n_blocks; ++j) {
                            const int k = acquire();
                            mma_s(0, k, j);
                            release(k);
                        }
                        for (int j = 0; j < n_blocks; ++j) {
                            const int v = acquire();
                            mma_pv(0, v, j);
                            release(v);
                            if (j + 2 < n_blocks) {
                                const int k = acquire();
                                mma_s(0, k, j + 2);
                                release(k);
                            }
                        }
                    }
                    g0 += n_blocks;
                    if (!PERSISTENT) break;
                }
            }
            __syncwarp();
        }
    } else {
        if constexpr (C::PRODUCER_WARPS == 4) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(SOFTMAX_REGS));
        // Softmax warpgroup t: thread = one query row of tile t (TMEM lane).
        const int t = warp / 4;
        const int row = (warp % 4) * 32 + lane;
        const uint32_t taddr = tmem + (uint32_t((warp % 4) * 32) << 16);
        const uint32_t o_addr = taddr + C::O_COL + t * C::D_PAD;
        int g0 = 0;   // blocks of the CTA's earlier units
        for (int n = 0;; ++n) {
            int u = 0;
            if (PERSISTENT) {
                mbar_wait(smem_u32(&q_full), n & 1);
                // The same in every lane; lane 0 arrives only once the reduction holds every lane's read.
                u = int(__reduce_or_sync(0xffffffffu, unsigned(get_slot(slot()))));
                if (u < 0) break;
                if (lane == 0) mbar_arrive(smem_u32(&q_empty));
            }
            const Unit w = unit_of(u);
            const int tile_q0 = w.q0 + t * BM;
            const int q = tile_q0 + row;
            float m = -INFINITY;   // running max of scale·log2(e)·s, the reference of l and O
            float l = 0.f;
            for (int j = 0; j < w.n_blocks; ++j) {
                const int g = g0 + j;
                const int b = buffer(t, g);
                const uint32_t s_addr = taddr + C::S_COL + 128 * b;
                mbar_wait(smem_u32(&s_full[b]), use(g) & 1);
                tc_fence_after();
                float s[BN];
#pragma unroll
                for (int c = 0; c < BN / 32; ++c) tmem_ld32(s_addr + 32 * c, s + 32 * c);
                const int k0 = j * BN;
                if (k0 + BN > S || (causal && k0 + BN - 1 > tile_q0)) {   // uniform over the tile
                    const int visible = causal ? min(S, q + 1) : S;       // keys [0, visible) take part
#pragma unroll
                    for (int c = 0; c < BN; ++c)
                        if (k0 + c >= visible) s[c] = -INFINITY;
                }
                // Four partial maxima and sums, as on the H100: one chain of BN dependent steps is the softmax's latency.
                float part[4];
#pragma unroll
                for (int c = 0; c < 4; ++c) part[c] = s[c];
#pragma unroll
                for (int c = 4; c < BN; ++c) part[c % 4] = fmaxf(part[c % 4], s[c]);
                const float mx = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
                const float m_new = fmaxf(m, mx * scale_log2);
                if (__any_sync(0xffffffffu, m_new > m + RESCALE_LOG2)) {   // warp-uniform: tcgen05.ld/st are .aligned
                    const float alpha = m_new == -INFINITY ? 1.f : ex2(m - m_new);
                    l *= alpha;
                    if (j > 0) {   // O holds blocks 0..j-1 once their last PV is done
                        mbar_wait(smem_u32(&o_done[buffer(t, g - 1)]), use(g - 1) & 1);
                        tc_fence_after();
#pragma unroll 1
                        for (int c = 0; c < D; c += 32) {
                            float o[32];
                            tmem_ld32(o_addr + c, o);
#pragma unroll
                            for (int e = 0; e < 32; ++e) o[e] *= alpha;
                            tmem_st32(o_addr + c, o);
                        }
                    }
                    m = m_new;
                }
                const float mb = m == -INFINITY ? 0.f : m;   // fully masked so far: P = exp2(-inf) = 0, not NaN
#pragma unroll
                for (int i = 0; i < 4; ++i) part[i] = 0.f;
#pragma unroll
                for (int c = 0; c < BN / 32; ++c) {
                    uint32_t p[16];
#pragma unroll
                    for (int e = 0; e < 16; ++e) {
                        const float p0 = ex2(fmaf(s[32 * c + 2 * e], scale_log2, -mb));
                        const float p1 = ex2(fmaf(s[32 * c + 2 * e + 1], scale_log2, -mb));
                        part[2 * (e % 2)] += p0;
                        part[2 * (e % 2) + 1] += p1;
                        p[e] = pack_bf16x2(p0, p1);
                    }
                    tmem_st16(s_addr + 16 * c, p);   // P[:, 32c .. 32c+31] over S columns already read
                }
                l += (part[0] + part[1]) + (part[2] + part[3]);
                tmem_wait_st();
                tc_fence_before();
                mbar_arrive(smem_u32(&p_full[b]));
            }
            g0 += w.n_blocks;
            // Epilogue: O / l in bf16 and LSE = ln(sum exp(scale·s)) = (m + log2 l) · ln 2. The next unit's first PV
            // into this O (accumulate 0) waits on p_full for the next unit's block 0, to which all 128 threads of this
            // warpgroup arrive only after their loads below have completed (the wait is in tmem_ld32's asm), with
            // tc_fence_before, and the MMA warp fences after its wait: p_full already orders the epilogue's reads of
            // O before the overwrite, so O needs no barrier of its own.
            mbar_wait(smem_u32(&o_done[buffer(t, g0 - 1)]), use(g0 - 1) & 1);
            tc_fence_after();
            const float inv_l = l > 0.f ? 1.f / l : 0.f;
            const size_t row_index = size_t(w.bh) * S + q;
            if (q < S) LSE[row_index] = (m + __log2f(l)) * LN2;
#pragma unroll 1
            for (int c = 0; c < D; c += 32) {
                float o[32];
                tmem_ld32(o_addr + c, o);
                if (q < S) {
                    uint4* dst = reinterpret_cast<uint4*>(O + row_index * D + c);
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float* v = o + 8 * e;
                        dst[e] = make_uint4(pack_bf16x2(v[0] * inv_l, v[1] * inv_l),
                                            pack_bf16x2(v[2] * inv_l, v[3] * inv_l),
                                            pack_bf16x2(v[4] * inv_l, v[5] * inv_l),
                                            pack_bf16x2(v[6] * inv_l, v[7] * inv_l));
                    }
                }
            }
            if (!PERSISTENT) break;
        }
    }

    // All TMEM reads done before the allocating warp frees the columns.
    tc_fence_before();
    __syncthreads();
    if (warp == C::MMA_WARP) {
        tc_fence_after();
        tmem_dealloc(tmem, 512);
    }
}

// [BH, S, D] bf16 as a 3-D tensor (D innermost), box [64 columns, 128 rows, 1 head], 128B swizzle; rows past
// S of a head and columns past D (D = 96) are zero-filled.
bool encode_heads(CUtensorMap* map, const void* ptr, int BH, int S, int D) {
    const cuuint64_t dims[3] = {cuuint64_t(D), cuuint64_t(S), cuuint64_t(BH)};
    const cuuint64_t strides[2] = {cuuint64_t(D) * 2, cuuint64_t(S) * D * 2};
    const cuuint32_t box[3] = {64, 128, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D, bool PERSISTENT>
cudaError_t run(const CUtensorMap (&maps)[3], __nv_bfloat16* O, float* LSE, int* work, int BH, int S, int causal,
                float scale, dim3 grid, cudaStream_t stream) {
    using C = Cfg<D>;
    cudaError_t err = cudaFuncSetAttribute(attention_fwd_tcgen05_kernel<D, PERSISTENT>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    if (PERSISTENT && (err = cudaMemsetAsync(work, 0, sizeof(int), stream)) != cudaSuccess) return err;
    attention_fwd_tcgen05_kernel<D, PERSISTENT><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(
        maps[0], maps[1], maps[2], O, LSE, work, BH, S, causal, scale * LOG2E);
    return cudaGetLastError();
}

// Persistent CTAs (one per SM, units handed out by the counter in the workspace) where there are more units than SMs
// and the workspace holds the counter and a slot per CTA; one CTA per unit otherwise. Not measured (no B200).
template <int D>
cudaError_t launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O,
                   float* LSE, int BH, int S, int causal, float scale, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream) {
    constexpr int GROUP_ROWS = Cfg<D>::Q_TILES * BM;
    CUtensorMap maps[3];
    if (!encode_heads(&maps[0], Q, BH, S, D) || !encode_heads(&maps[1], K, BH, S, D) ||
        !encode_heads(&maps[2], V, BH, S, D))
        return cudaErrorInvalidValue;
    const int groups = (S + GROUP_ROWS - 1) / GROUP_ROWS;
    int device = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    const bool persistent = (long long)groups * BH > sms && workspace &&
                            workspace_bytes >= (1 + (size_t)sms) * sizeof(int) &&
                            (reinterpret_cast<uintptr_t>(workspace) & 3) == 0;
    if (persistent)
        return run<D, true>(maps, O, LSE, static_cast<int*>(workspace), BH, S, causal, scale, dim3(sms), stream);
    return run<D, false>(maps, O, LSE, nullptr, BH, S, causal, scale, dim3(unsigned(BH), unsigned(groups)), stream);
}

}  // namespace

extern "C" cudaError_t ptxbench_attention_fwd(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                                              __nv_bfloat16* O, float* LSE, int B, int H, int S, int D, int causal,
                                              float scale, void* workspace, size_t workspace_bytes,
                                              cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || long(B) * H > 0x7fffffffL || !(scale > 0.f)) return cudaErrorInvalidValue;
    // TMA needs 16-B aligned bases; the epilogue stores 16 B.
    if ((reinterpret_cast<uintptr_t>(Q) | reinterpret_cast<uintptr_t>(K) | reinterpret_cast<uintptr_t>(V) |
         reinterpret_cast<uintptr_t>(O)) & 15)
        return cudaErrorInvalidValue;
    const int BH = B * H;
    switch (D) {
        case 64: return launch<64>(Q, K, V, O, LSE, BH, S, causal, scale, workspace, workspace_bytes, stream);
        case 96: return launch<96>(Q, K, V, O, LSE, BH, S, causal, scale, workspace, workspace_bytes, stream);
        case 128: return launch<128>(Q, K, V, O, LSE, BH, S, causal, scale, workspace, workspace_bytes, stream);
        case 256: return launch<256>(Q, K, V, O, LSE, BH, S, causal, scale, workspace, workspace_bytes, stream);
        default: return cudaErrorInvalidValue;
    }
}
