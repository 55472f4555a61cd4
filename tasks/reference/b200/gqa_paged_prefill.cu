// Reference Blackwell (sm_100a) paged GQA prefill: B sequences append q_len[b] new tokens to a paged KV cache.
// q, output [T, H, D] bf16 packed by qo_indptr; k_cache, v_cache [pages, P, KV, D] bf16 (NHD); sequence b
// owns pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]-1], the last holding kv_last_page_len[b] tokens.
// Query head h reads KV head h / (H / KV). Causal: bottom-right aligned, query row i of b attends keys
// 0 .. i + kv_len[b] - q_len[b]. lse [T, H] fp32, natural log.
//
// NOT RUN ON HARDWARE: built and disassembled only (no B200 was available). The MMA / TMEM machinery is that
// of tasks/reference/b200/attention_fwd.cu (D = 128 path: two 128-row Q tiles ping-pong), whose bit layouts
// are spelled out there; what is new here is the paged / GQA addressing, which is the same as in
// tasks/reference/h100/gqa_paged_prefill.cu (checked there by a host-side emulation).
//
// Design
//  * GQA packing: a CTA serves one KV head g and its G = H / KV query heads over 2·TQ consecutive query tokens
//    of one sequence (TQ = 128 / G): Q tile t (t = 0, 1) is 128 rows, row r = token t·TQ + r / G, head
//    g·G + r % G, loaded by one 3D TMA box {64 columns, G heads, TQ tokens} per 64-column panel over q seen as
//    {D, H, T} (exactly 128 rows of 128 B in that order, 128B swizzle). Rows past the sequence are computed
//    and never stored.
//  * Warps: 0-7 softmax (warpgroup t = tile t, one row per thread = TMEM lane), 8 TMA (Q; and K/V when
//    P % 64 == 0), 9 MMA (tcgen05.mma, owns TMEM), 10-11 K/V loaders when P % 64 != 0.
//  * K/V blocks of 128 keys go into one ring of 4 slots in the MMA warp's order K(j), V(j), K(j+1), ...
//      P % 64 == 0: 4D tensor maps {D, KV, P, pages}, box {64, 1, 64, 1} (64 tokens of a page x 64 columns):
//        2 chunks x 2 panels per block, the page from kv_indices.
//      other P (P = 1): warps 10-11 gather with cp.async (16 B per lane) into the same 128B-swizzled layout,
//        computed by hand (chunk c of row r at c ^ (r % 8)); warp w takes rows 64w .. 64w + 63, a lane looks
//        up one row's cache position per 32 rows and a width-16 shuffle hands it to the 16 lanes that copy that
//        row's 256 bytes (three instructions a copy). Completion
//        by cp.async.mbarrier.arrive.noinc (64 arrivals per slot); the MMA warp issues fence.proxy.async after
//        the wait so that the tensor core (async proxy) sees the generic-proxy writes.
//      Keys past kv_len re-read the sequence's last token / 64-chunk (finite data, masked).
//  * Softmax per row: key c hidden when c > lim (lim = min(kv_len - 1, causal limit of the row's token)); only
//    blocks past the tile's smallest limit are masked. Lazy O rescale as in the dense kernel.
//  * Work list, KV splits and merge kernel: as the Hopper reference (host plan in a __grid_constant__ struct,
//    sequences by decreasing cost, long-KV tiles cut into block ranges whose partials the merge combines).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int HEAD_DIM = 128;
constexpr int BM = 128;   // rows of a Q tile = TMEM lanes
constexpr int BN = 128;   // keys per K/V block
constexpr int QT = 2;     // Q tiles per CTA
constexpr int UMMA_K = 16;
constexpr int BOXES = HEAD_DIM / 64;
constexpr int SOFTMAX_WARPS = 4 * QT;
constexpr int TMA_WARP = SOFTMAX_WARPS;
constexpr int MMA_WARP = SOFTMAX_WARPS + 1;
constexpr int LOAD_WARP0 = SOFTMAX_WARPS + 2;   // cp.async loaders: warps 10 and 11
constexpr int THREADS = 32 * (SOFTMAX_WARPS + 4);
constexpr int Q_TILE_BYTES = BM * HEAD_DIM * 2;
constexpr int KV_BYTES = BN * HEAD_DIM * 2;
constexpr int SLOTS = 4;
constexpr int SMEM_BYTES = QT * Q_TILE_BYTES + SLOTS * KV_BYTES + 1024;
constexpr uint32_t S_COL = 0;     // S buffer b at S_COL + 128 b
constexpr uint32_t O_COL = 256;   // O of tile t at O_COL + 128 t
constexpr int CPASYNC_ARRIVALS = 64;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float RESCALE_LOG2 = 8.0f;
constexpr uint32_t PRODUCER_REGS = 88;
constexpr uint32_t SOFTMAX_REGS = 208;
constexpr int MAX_SEQS = 128;
constexpr int MAX_SPLITS = 16;
constexpr int MERGE_WARPS = 8;

struct Plan {
    int direct;                     // 1: blockIdx.x / KV = b * max_tiles + local tile (no table, no split)
    int max_tiles;
    int nseq;
    int nmerge;
    int tile_start[MAX_SEQS + 1];   // first work item (tile x split) of the j-th sequence in work order
    int seq[MAX_SEQS];
    int nsplit[MAX_SEQS];
    int part_base[MAX_SEQS];        // partial row = base + (s·q_len + tok)·H + h
    int merge_j[MAX_SEQS];
};

struct Args {
    const __nv_bfloat16* k;
    const __nv_bfloat16* v;
    const int* qo_indptr;
    const int* kv_indptr;
    const int* kv_indices;
    const int* last;
    __nv_bfloat16* out;
    float* lse;
    float2* part_ml;
    float* part_o;
    int H, KV, G, TQ, P, p_shift;   // TQ: tokens of one Q tile (the CTA holds QT·TQ)
    int causal;
    float scale_log2;
};

// Instruction descriptor for tcgen05.mma .kind::f16 (see attention_fwd.cu): F32 accumulate, BF16 A and B,
// A K-major, B K-major (0) or MN-major (1), N >> 3 at bit 17, M >> 4 at bit 24.
__host__ __device__ constexpr uint32_t idesc(int n, bool b_mn_major) {
    return (1u << 4) | (1u << 7) | (1u << 10) | (uint32_t(b_mn_major) << 16) | (uint32_t(n >> 3) << 17) |
           (uint32_t(BM >> 4) << 24);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];"
                 :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
// base + row · 256 bytes (one token of one KV head) in one multiply-add.
__device__ __forceinline__ const void* row_address(const char* base, uint32_t row) {
    uint64_t address;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(address) : "r"(row), "n"(HEAD_DIM * 2), "l"(reinterpret_cast<uint64_t>(base)));
    return reinterpret_cast<const void*>(address);
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(src))
                 : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after()  { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// 128B-swizzled smem operand descriptor (sm100: version 1 at bit 46, swizzle 2 = 128B at [61,64)).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr, uint32_t lbo_bytes) {
    return uint64_t((saddr & 0x3FFFFu) >> 4) | (uint64_t(lbo_bytes >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 46) | (uint64_t(2) << 61);
}
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t saddr) { return sw128_desc(saddr, 16); }
__device__ __forceinline__ uint64_t mnmajor_desc(uint32_t saddr) { return sw128_desc(saddr, BN * 128); }

__device__ __forceinline__ void umma_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t id,
                                        uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(id), "r"(accumulate) : "memory");
}
__device__ __forceinline__ void umma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t id,
                                        uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "r"(a_tmem), "l"(b_desc), "r"(id), "r"(accumulate) : "memory");
}
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

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

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

// The CTA's work item (same formulas as the host plan).
struct Tile {
    int g, q_start, q_len, kv_len, diag, pbase;
    int q0;           // first query token of Q tile 0 (tile t starts at q0 + t·TQ)
    int kb0, nblk;    // key blocks kb0 .. kb0 + nblk - 1
    int split, nsplit, part_base;
    bool valid;
};

__device__ __forceinline__ Tile find_tile(const Args& a, const Plan& plan) {
    Tile t;
    const int x = blockIdx.x / a.KV;
    t.g = blockIdx.x % a.KV;
    int b, local;
    t.split = 0;
    t.nsplit = 1;
    t.part_base = 0;
    if (plan.direct) {
        b = x / plan.max_tiles;
        local = x % plan.max_tiles;
    } else {
        int lo = 0, hi = plan.nseq - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (plan.tile_start[mid] <= x) lo = mid; else hi = mid - 1;
        }
        b = plan.seq[lo];
        t.nsplit = plan.nsplit[lo];
        t.part_base = plan.part_base[lo];
        local = (x - plan.tile_start[lo]) / t.nsplit;
        t.split = (x - plan.tile_start[lo]) % t.nsplit;
    }
    const int CT = QT * a.TQ;
    t.q_start = __ldg(a.qo_indptr + b);
    t.q_len = __ldg(a.qo_indptr + b + 1) - t.q_start;
    t.pbase = __ldg(a.kv_indptr + b);
    t.kv_len = (__ldg(a.kv_indptr + b + 1) - t.pbase - 1) * a.P + __ldg(a.last + b);
    t.diag = t.kv_len - t.q_len;
    const int ntiles = (t.q_len + CT - 1) / CT;
    t.valid = local < ntiles && t.kv_len > 0;
    const int qt = a.causal ? ntiles - 1 - local : local;
    t.q0 = qt * CT;
    const int q_last = min(t.q0 + CT, t.q_len) - 1;
    const int kv_end = a.causal ? min(t.kv_len, q_last + t.diag + 1) : t.kv_len;
    const int k_end = max(1, (kv_end + BN - 1) / BN);
    t.kb0 = t.split * k_end / t.nsplit;
    t.nblk = (t.split + 1) * k_end / t.nsplit - t.kb0;
    return t;
}

template <bool TMA_KV>
__global__ void __launch_bounds__(THREADS, 1)
gqa_paged_prefill_tcgen05_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                                 const __grid_constant__ CUtensorMap tmV, const __grid_constant__ Args a,
                                 const __grid_constant__ Plan plan) {
    __shared__ __align__(8) uint64_t q_full;
    __shared__ __align__(8) uint64_t kv_full[SLOTS];
    __shared__ __align__(8) uint64_t kv_empty[SLOTS];
    __shared__ __align__(8) uint64_t s_full[2];
    __shared__ __align__(8) uint64_t p_full[2];
    __shared__ __align__(8) uint64_t o_done[2];
    __shared__ uint32_t tmem_slot;
    extern __shared__ uint8_t dyn_smem[];
    const uint32_t q_smem = (smem_u32(dyn_smem) + 1023u) & ~1023u;
    const uint32_t kv_smem = q_smem + QT * Q_TILE_BYTES;

    if (!find_tile(a, plan).valid) return;   // the whole CTA, before any barrier or TMEM allocation
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;

    if (warp == TMA_WARP && lane == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmQ)) : "memory");
        if constexpr (TMA_KV) {
            asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmK)) : "memory");
            asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmV)) : "memory");
        }
        mbar_init(smem_u32(&q_full), 1);
        for (int s = 0; s < SLOTS; ++s) {
            mbar_init(smem_u32(&kv_full[s]), TMA_KV ? 1 : CPASYNC_ARRIVALS);
            mbar_init(smem_u32(&kv_empty[s]), 1);
        }
        for (int b = 0; b < 2; ++b) {
            mbar_init(smem_u32(&s_full[b]), 1);
            mbar_init(smem_u32(&p_full[b]), 128);
            mbar_init(smem_u32(&o_done[b]), 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (warp == MMA_WARP) tmem_alloc(smem_u32(&tmem_slot), 512);
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const uint32_t tmem = tmem_slot;

    if (warp >= SOFTMAX_WARPS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(PRODUCER_REGS));
        // The work item is found again on each side of setmaxnreg (nothing but tmem lives across it).
        const Tile tl = find_tile(a, plan);
        const int n_blocks = tl.nblk, kb0 = tl.kb0;
        if (warp == TMA_WARP) {
            if (lane == 0) {
                const uint32_t qb = smem_u32(&q_full);
                mbar_expect_tx(qb, QT * Q_TILE_BYTES);   // out-of-bounds parts of a box count too (zero-filled)
                for (int t = 0; t < QT; ++t)
                    for (int b = 0; b < BOXES; ++b)
                        tma_load_3d(q_smem + t * Q_TILE_BYTES + b * BM * 128, &tmQ, b * 64, tl.g * a.G,
                                    tl.q_start + tl.q0 + t * a.TQ, qb);
                if constexpr (TMA_KV) {
                    const int last_chunk = ((tl.kv_len - 1) / 64) * 64;
                    Ring<SLOTS> ring;
                    auto load = [&](const CUtensorMap* map, int kb) {
                        int page[2], slot[2];
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int c0 = min(kb * BN + 64 * j, last_chunk);
                            const int pi = c0 / a.P;
                            page[j] = __ldg(a.kv_indices + tl.pbase + pi);
                            slot[j] = c0 - pi * a.P;
                        }
                        mbar_wait(smem_u32(&kv_empty[ring.slot]), ring.phase ^ 1);
                        const uint32_t fb = smem_u32(&kv_full[ring.slot]);
                        const uint32_t dst = kv_smem + ring.slot * KV_BYTES;
                        mbar_expect_tx(fb, KV_BYTES);
#pragma unroll
                        for (int j = 0; j < 2; ++j)
#pragma unroll
                            for (int b = 0; b < BOXES; ++b)
                                tma_load_4d(dst + b * BN * 128 + j * 64 * 128, map, b * 64, tl.g, slot[j], page[j], fb);
                        ring.advance();
                    };
                    for (int j = 0; j < n_blocks; ++j) {
                        load(&tmK, kb0 + j);
                        load(&tmV, kb0 + j);
                    }
                }
            }
            __syncwarp();
        } else if (warp == MMA_WARP) {
            if (lane == 0) {
                constexpr uint32_t ID_S = idesc(BN, false);          // S[128 x 128] = Q · Kᵀ
                constexpr uint32_t ID_O = idesc(HEAD_DIM, true);     // O[128 x D] += P · V, V MN-major
                Ring<SLOTS> ring;
                auto acquire = [&]() {
                    const int s = ring.slot;
                    mbar_wait(smem_u32(&kv_full[s]), ring.phase);
                    if constexpr (!TMA_KV) fence_proxy_async();   // cp.async (generic proxy) -> tensor core
                    tc_fence_after();
                    ring.advance();
                    return s;
                };
                auto release = [&](int s) { umma_commit(smem_u32(&kv_empty[s])); };
                auto mma_s = [&](int t, int kslot, int b) {
                    const uint32_t qa = q_smem + t * Q_TILE_BYTES;
                    const uint32_t ka = kv_smem + kslot * KV_BYTES;
#pragma unroll
                    for (int k = 0; k < HEAD_DIM / UMMA_K; ++k) {
                        const uint32_t off = (k / 4) * (BM * 128) + (k % 4) * 32;
                        umma_ss(tmem + S_COL + 128 * b, kmajor_desc(qa + off), kmajor_desc(ka + off), ID_S, k > 0);
                    }
                    umma_commit(smem_u32(&s_full[b]));
                };
                auto mma_pv = [&](int t, int vslot, int b, int j) {
                    mbar_wait(smem_u32(&p_full[b]), j & 1);
                    tc_fence_after();
                    const uint32_t va = kv_smem + vslot * KV_BYTES;
#pragma unroll
                    for (int k = 0; k < BN / UMMA_K; ++k)
                        umma_ts(tmem + O_COL + t * HEAD_DIM, tmem + S_COL + 128 * b + 8 * k,
                                mnmajor_desc(va + k * 2048), ID_O, (j | k) != 0);
                    umma_commit(smem_u32(&o_done[t]));
                };
                mbar_wait(smem_u32(&q_full), 0);
                tc_fence_after();
                // S0(0) S1(0) | PV0(j) S0(j+1) PV1(j) S1(j+1) ...: one tile's softmax runs under the other's MMAs.
                int k = acquire();
                mma_s(0, k, 0);
                mma_s(1, k, 1);
                for (int j = 0; j < n_blocks; ++j) {
                    const int v = acquire();
                    release(k);   // after S1(j)
                    mma_pv(0, v, 0, j);
                    const bool more = j + 1 < n_blocks;
                    if (more) {
                        k = acquire();
                        mma_s(0, k, 0);
                    }
                    mma_pv(1, v, 1, j);
                    release(v);
                    if (more) mma_s(1, k, 1);
                }
            }
            __syncwarp();
        } else if (!TMA_KV) {
            // Warps 10-11: cp.async gathers of K and V, in the ring order K(j), V(j), K(j + 1), ...
            const int hf = warp - LOAD_WARP0;
            const int c16 = lane & 15;                       // 16-byte chunk of the 256-byte row
            const int sub = lane >> 4;                       // odd or even rows
            // Lane L looks up row 2·(L % 16) + L / 16 of each group of 32 rows; step j copies rows 2j (lanes
            // 0-15) and 2j + 1 (lanes 16-31). lane_dst[q]: this lane's chunk in rows 64 hf + 2q + sub of a
            // slot; row 64 hf + 32 h2 + 8 m + 2q + sub adds (32 h2 + 8 m)·128, leaving the swizzle alone.
            uint32_t lane_dst[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const uint32_t r = (uint32_t)(2 * q + sub);
                lane_dst[q] = (uint32_t)(c16 >> 3) * (BN * 128) + (uint32_t)(64 * hf + r) * 128 +
                              (((uint32_t)(c16 & 7) ^ r) << 4);
            }
            Ring<SLOTS> ring;
            for (int j = 0; j < n_blocks; ++j) {
                const int kb = kb0 + j;
                uint32_t row_id[2];   // the 256-byte row (cache token · KV + g); fits 32 bits (host bound)
#pragma unroll
                for (int h2 = 0; h2 < 2; ++h2) {
                    const int tok = min(kb * BN + 64 * hf + 32 * h2 + 2 * c16 + sub, tl.kv_len - 1);
                    int pi, slot;
                    if (a.p_shift >= 0) {
                        pi = tok >> a.p_shift;
                        slot = tok & (a.P - 1);
                    } else {
                        pi = tok / a.P;
                        slot = tok - pi * a.P;
                    }
                    row_id[h2] = (uint32_t)((__ldg(a.kv_indices + tl.pbase + pi) * a.P + slot) * a.KV + tl.g);
                }
#pragma unroll 1
                for (int kv = 0; kv < 2; ++kv) {
                    const char* base = reinterpret_cast<const char*>(kv ? a.v : a.k) + c16 * 16;
                    mbar_wait(smem_u32(&kv_empty[ring.slot]), ring.phase ^ 1);
                    const uint32_t slot_base = kv_smem + ring.slot * KV_BYTES;
#pragma unroll
                    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
                        for (int step = 0; step < 16; ++step) {
                            const uint32_t r = __shfl_sync(0xffffffffu, row_id[h2], step, 16);
                            cp_async_16(slot_base + lane_dst[step % 4] + (uint32_t)(32 * h2 + 8 * (step / 4)) * 128,
                                        row_address(base, r));
                        }
                    cp_async_arrive_noinc(smem_u32(&kv_full[ring.slot]));
                    ring.advance();
                }
            }
            asm volatile("cp.async.wait_all;" ::: "memory");
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(SOFTMAX_REGS));
        const Tile tl = find_tile(a, plan);
        const int n_blocks = tl.nblk, kb0 = tl.kb0;
        // Softmax warpgroup t: thread = one row of Q tile t (TMEM lane).
        const int t = warp / 4;
        const int row = (warp % 4) * 32 + lane;
        const int G = a.G;
        const int tok = tl.q0 + t * a.TQ + row / G;            // query token (within the sequence) of the row
        const int lim = a.causal ? min(tok + tl.diag, tl.kv_len - 1) : tl.kv_len - 1;
        const int tile_min_lim = a.causal ? min(tl.q0 + t * a.TQ + tl.diag, tl.kv_len - 1) : tl.kv_len - 1;
        const float scale_log2 = a.scale_log2;
        const uint32_t taddr = tmem + (uint32_t((warp % 4) * 32) << 16);
        const uint32_t o_addr = taddr + O_COL + t * HEAD_DIM;
        float m = -INFINITY;   // running reference max of scale·log2(e)·s
        float l = 0.f;
        for (int j = 0; j < n_blocks; ++j) {
            const uint32_t s_addr = taddr + S_COL + 128 * t;
            mbar_wait(smem_u32(&s_full[t]), j & 1);
            tc_fence_after();
            float s[BN];
#pragma unroll
            for (int c = 0; c < BN / 32; ++c) tmem_ld32(s_addr + 32 * c, s + 32 * c);
            const int k0 = (kb0 + j) * BN;
            if (k0 + BN - 1 > tile_min_lim) {   // uniform over the tile
#pragma unroll
                for (int c = 0; c < BN; ++c)
                    if (k0 + c > lim) s[c] = -INFINITY;
            }
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < BN; ++c) mx = fmaxf(mx, s[c]);
            const float m_new = fmaxf(m, mx * scale_log2);
            if (__any_sync(0xffffffffu, m_new > m + RESCALE_LOG2)) {   // warp-uniform: tcgen05.ld/st are .aligned
                const float alpha = m_new == -INFINITY ? 1.f : exp2_approx(m - m_new);
                l *= alpha;
                if (j > 0) {
                    mbar_wait(smem_u32(&o_done[t]), (j - 1) & 1);
                    tc_fence_after();
#pragma unroll 1
                    for (int c = 0; c < HEAD_DIM; c += 32) {
                        float o[32];
                        tmem_ld32(o_addr + c, o);
#pragma unroll
                        for (int e = 0; e < 32; ++e) o[e] *= alpha;
                        tmem_st32(o_addr + c, o);
                    }
                }
                m = m_new;
            }
            const float mb = m == -INFINITY ? 0.f : m;
            float sum = 0.f;
#pragma unroll
            for (int c = 0; c < BN / 32; ++c) {
                uint32_t p[16];
#pragma unroll
                for (int e = 0; e < 16; ++e) {
                    const float p0 = exp2_approx(fmaf(s[32 * c + 2 * e], scale_log2, -mb));
                    const float p1 = exp2_approx(fmaf(s[32 * c + 2 * e + 1], scale_log2, -mb));
                    sum += p0 + p1;
                    p[e] = pack_bf16(p0, p1);
                }
                tmem_st16(s_addr + 16 * c, p);
            }
            l += sum;
            tmem_wait_st();
            tc_fence_before();
            mbar_arrive(smem_u32(&p_full[t]));
        }
        // Epilogue: O / l in bf16 and lse = (m + log2 l)·ln 2, or the unnormalised partial of a KV split.
        mbar_wait(smem_u32(&o_done[t]), (n_blocks - 1) & 1);
        tc_fence_after();
        const bool store = tok < tl.q_len;
        const int head = tl.g * G + row % G;
        if (tl.nsplit > 1) {
            const size_t prow = (size_t)tl.part_base + ((size_t)tl.split * tl.q_len + tok) * a.H + head;
            if (store) a.part_ml[prow] = make_float2(m, l);
#pragma unroll 1
            for (int c = 0; c < HEAD_DIM; c += 32) {
                float o[32];
                tmem_ld32(o_addr + c, o);
                if (store) {
                    float4* dst = reinterpret_cast<float4*>(a.part_o + prow * HEAD_DIM + c);
#pragma unroll
                    for (int e = 0; e < 8; ++e) dst[e] = make_float4(o[4 * e], o[4 * e + 1], o[4 * e + 2], o[4 * e + 3]);
                }
            }
        } else {
            const float inv_l = l > 0.f ? 1.f / l : 0.f;
            const size_t orow = (size_t)(tl.q_start + tok) * a.H + head;
            if (store) a.lse[orow] = (m + __log2f(l)) * LN2;
#pragma unroll 1
            for (int c = 0; c < HEAD_DIM; c += 32) {
                float o[32];
                tmem_ld32(o_addr + c, o);
                if (store) {
                    uint4* dst = reinterpret_cast<uint4*>(a.out + orow * HEAD_DIM + c);
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float* v = o + 8 * e;
                        dst[e] = make_uint4(pack_bf16(v[0] * inv_l, v[1] * inv_l), pack_bf16(v[2] * inv_l, v[3] * inv_l),
                                            pack_bf16(v[4] * inv_l, v[5] * inv_l), pack_bf16(v[6] * inv_l, v[7] * inv_l));
                    }
                }
            }
        }
    }

    tc_fence_before();
    __syncthreads();
    if (warp == MMA_WARP) {
        tc_fence_after();
        tmem_dealloc(tmem, 512);
    }
}

// ------------------------------------------------------------------------------------------------
// Merge of the KV splits: one warp per (token, head) row of a split sequence (blockIdx.y: which one);
// lane l owns columns 4l .. 4l + 3.
// ------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(MERGE_WARPS * 32)
gqa_paged_prefill_merge(const __grid_constant__ Args a, const __grid_constant__ Plan plan) {
    const int j = plan.merge_j[blockIdx.y];
    const int b = plan.seq[j], ns = plan.nsplit[j];
    const int q_start = __ldg(a.qo_indptr + b), q_len = __ldg(a.qo_indptr + b + 1) - q_start;
    const int row = blockIdx.x * MERGE_WARPS + (int)(threadIdx.x / 32), lane = threadIdx.x & 31;
    if (row >= q_len * a.H) return;
    const size_t stride = (size_t)q_len * a.H;   // between the splits of one row
    const size_t prow0 = (size_t)plan.part_base[j] + row;
    float mx = -INFINITY;
    for (int s = 0; s < ns; ++s) mx = fmaxf(mx, a.part_ml[prow0 + s * stride].x);
    float lsum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < ns; ++s) {
        const size_t prow = prow0 + s * stride;
        const float2 ml = a.part_ml[prow];
        const float w = ml.x == -INFINITY ? 0.f : exp2_approx(ml.x - mx);   // a split with no visible key
        const float4 v = reinterpret_cast<const float4*>(a.part_o + prow * HEAD_DIM)[lane];
        lsum += w * ml.y;
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
    }
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
    const size_t orow = (size_t)q_start * a.H + row;   // rows of a sequence are (token, head) in order
    uint2 packed;
    packed.x = pack_bf16(acc.x * inv, acc.y * inv);
    packed.y = pack_bf16(acc.z * inv, acc.w * inv);
    reinterpret_cast<uint2*>(a.out + orow * HEAD_DIM)[lane] = packed;
    if (lane == 0) a.lse[orow] = (mx + log2f(lsum)) * LN2;
}

bool encode(CUtensorMap* map, const void* ptr, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
            const cuuint32_t* box) {
    const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <bool TMA_KV>
cudaError_t launch(const CUtensorMap& tq, const CUtensorMap& tk, const CUtensorMap& tv, const Args& a,
                   const Plan& plan, unsigned grid, unsigned merge_x, cudaStream_t stream) {
    cudaError_t err = cudaFuncSetAttribute(gqa_paged_prefill_tcgen05_kernel<TMA_KV>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (err != cudaSuccess) return err;
    gqa_paged_prefill_tcgen05_kernel<TMA_KV><<<grid, THREADS, SMEM_BYTES, stream>>>(tq, tk, tv, a, plan);
    err = cudaGetLastError();
    if (err != cudaSuccess || plan.nmerge == 0) return err;
    gqa_paged_prefill_merge<<<dim3(merge_x, plan.nmerge), MERGE_WARPS * 32, 0, stream>>>(a, plan);
    return cudaGetLastError();
}

// Key blocks of work tile qt (CT query tokens) of a sequence (the same formula as find_tile).
int tile_blocks(int qt, int q_len, int kv_len, int CT, bool causal) {
    const int q_last = (q_len < (qt + 1) * CT ? q_len : (qt + 1) * CT) - 1;
    int kv_end = kv_len;
    if (causal && q_last + kv_len - q_len + 1 < kv_len) kv_end = q_last + kv_len - q_len + 1;
    const int blocks = (kv_end + BN - 1) / BN;
    return blocks > 1 ? blocks : 1;
}

}  // namespace

extern "C" cudaError_t ptxbench_gqa_paged_prefill(
    const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* qo_indptr,
    const int* kv_indptr, const int* kv_indices, const int* kv_last_page_len, const int* qo_indptr_host,
    const int* kv_indptr_host, const int* kv_indices_host, const int* kv_last_page_len_host, __nv_bfloat16* output,
    float* lse, int B, int H, int KV, int D, int P, int causal, float sm_scale, void* workspace,
    size_t workspace_bytes, cudaStream_t stream) {
    if (D != HEAD_DIM || B <= 0 || H <= 0 || KV <= 0 || P <= 0 || H % KV != 0) return cudaErrorInvalidValue;
    const int G = H / KV;
    if (BM % G != 0) return cudaErrorInvalidValue;   // G in {1, 2, 4, ..., 128}
    if (!q || !k_cache || !v_cache || !qo_indptr || !kv_indptr || !kv_indices || !kv_last_page_len ||
        !qo_indptr_host || !kv_indptr_host || !kv_indices_host || !kv_last_page_len_host || !output || !lse)
        return cudaErrorInvalidValue;
    if (((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k_cache) |
          reinterpret_cast<uintptr_t>(v_cache)) & 15) ||
        (reinterpret_cast<uintptr_t>(output) & 15) || (reinterpret_cast<uintptr_t>(lse) & 3) ||
        (reinterpret_cast<uintptr_t>(workspace) & 15))
        return cudaErrorInvalidValue;
    const int TQ = BM / G;       // tokens of one 128-row Q tile
    const int CT = QT * TQ;      // tokens of a CTA's work tile
    const bool is_causal = causal != 0;

    // Lengths from the host copies; the page dimension of the cache maps = the largest page used + 1.
    if (qo_indptr_host[0] < 0) return cudaErrorInvalidValue;
    long long max_page = 0, tiles = 0, total_blocks = 0;
    int max_tiles = 0;
    for (int b = 0; b < B; ++b) {
        const int ql = qo_indptr_host[b + 1] - qo_indptr_host[b];
        const int pages = kv_indptr_host[b + 1] - kv_indptr_host[b];
        const int last = kv_last_page_len_host[b];
        if (ql < 0 || pages < 1 || last < 1 || last > P) return cudaErrorInvalidValue;
        if ((long long)(pages - 1) * P + last > 0x7fffffffLL) return cudaErrorInvalidValue;
        for (int i = kv_indptr_host[b]; i < kv_indptr_host[b + 1]; ++i) {
            if (kv_indices_host[i] < 0) return cudaErrorInvalidValue;
            if (kv_indices_host[i] > max_page) max_page = kv_indices_host[i];
        }
        const int nt = (ql + CT - 1) / CT;
        const int kvl = (pages - 1) * P + last;
        for (int qt = 0; qt < nt; ++qt) total_blocks += tile_blocks(qt, ql, kvl, CT, is_causal);
        tiles += nt;
        if (nt > max_tiles) max_tiles = nt;
    }
    const int T = qo_indptr_host[B];
    if (tiles == 0 || T <= 0) return cudaSuccess;
    if ((max_page + 1) * (long long)P * KV > 0x7fffffffLL) return cudaErrorInvalidValue;   // 32-bit token index

    int device = 0, sms = 132;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1)
        sms = 132;

    Plan plan{};
    long long grid_items;
    unsigned merge_x = 0;
    if (B <= MAX_SEQS) {
        // KV splits: a CTA should not hold much more than half an SM's fair share of key blocks, so that one
        // long sequence (few query tiles, many keys) does not set the critical path. Each tile of a split
        // sequence is cut into nsplit equal block ranges (nsplit <= its fewest blocks), the partials go to the
        // workspace and a merge kernel combines them.
        const long long fair = (total_blocks * KV + sms - 1) / sms;
        const int chunk = (int)(fair / 2 > 8 ? fair / 2 : 8);
        const size_t part_row_bytes = sizeof(float2) + HEAD_DIM * sizeof(float);
        const size_t ml_align = 256;
        const long long capacity =
            workspace && workspace_bytes > ml_align ? (long long)((workspace_bytes - ml_align) / part_row_bytes) : 0;
        int cost[MAX_SEQS];
        long long part_rows = 0;
        for (int b = 0; b < B; ++b) {
            const int ql = qo_indptr_host[b + 1] - qo_indptr_host[b];
            const int kvl = (kv_indptr_host[b + 1] - kv_indptr_host[b] - 1) * P + kv_last_page_len_host[b];
            const int nt = (ql + CT - 1) / CT;
            int most = 1, fewest = 1;
            if (nt > 0) {
                most = tile_blocks(nt - 1, ql, kvl, CT, is_causal);
                fewest = tile_blocks(0, ql, kvl, CT, is_causal);
            }
            int ns = (most + chunk - 1) / chunk;
            if (ns > fewest) ns = fewest;
            if (ns > MAX_SPLITS) ns = MAX_SPLITS;
            if (ns < 1 || nt == 0) ns = 1;
            if (ns > 1 && part_rows + (long long)ns * ql * H > capacity) ns = 1;   // no room: unsplit
            plan.nsplit[b] = ns;   // indexed by sequence for now, permuted below
            plan.part_base[b] = (int)part_rows;
            if (ns > 1) part_rows += (long long)ns * ql * H;
            cost[b] = nt > 0 ? (most + ns - 1) / ns : 0;
            plan.seq[b] = b;
        }
        if (part_rows > 0x7fffffffLL) return cudaErrorInvalidValue;
        // Work order: sequences by decreasing cost of their largest work item (stable insertion sort).
        for (int i = 1; i < B; ++i) {
            const int sq = plan.seq[i];
            int j = i - 1;
            while (j >= 0 && cost[plan.seq[j]] < cost[sq]) {
                plan.seq[j + 1] = plan.seq[j];
                --j;
            }
            plan.seq[j + 1] = sq;
        }
        int by_seq_ns[MAX_SEQS], by_seq_base[MAX_SEQS];
        for (int b = 0; b < B; ++b) {
            by_seq_ns[b] = plan.nsplit[b];
            by_seq_base[b] = plan.part_base[b];
        }
        plan.direct = 0;
        plan.nseq = B;
        int acc = 0, max_rows = 0;
        for (int j = 0; j < B; ++j) {
            const int b = plan.seq[j];
            const int ql = qo_indptr_host[b + 1] - qo_indptr_host[b];
            plan.nsplit[j] = by_seq_ns[b];
            plan.part_base[j] = by_seq_base[b];
            plan.tile_start[j] = acc;
            acc += (ql + CT - 1) / CT * plan.nsplit[j];
            if (plan.nsplit[j] > 1) {
                plan.merge_j[plan.nmerge++] = j;
                if (ql * H > max_rows) max_rows = ql * H;
            }
        }
        plan.tile_start[B] = acc;
        grid_items = acc;
        merge_x = (unsigned)((max_rows + MERGE_WARPS - 1) / MERGE_WARPS);
    } else {
        plan.direct = 1;
        plan.max_tiles = max_tiles;
        grid_items = (long long)B * max_tiles;
    }
    if (grid_items * KV > 0x7fffffffLL) return cudaErrorInvalidValue;

    Args a;
    a.k = k_cache;
    a.v = v_cache;
    a.qo_indptr = qo_indptr;
    a.kv_indptr = kv_indptr;
    a.kv_indices = kv_indices;
    a.last = kv_last_page_len;
    a.out = output;
    a.lse = lse;
    a.part_ml = reinterpret_cast<float2*>(workspace);
    a.part_o = nullptr;
    if (plan.nmerge > 0) {
        long long rows = 0;   // the partial rows in use, as counted above
        for (int i = 0; i < plan.nmerge; ++i) {
            const int j = plan.merge_j[i], b = plan.seq[j];
            const long long end =
                plan.part_base[j] + (long long)plan.nsplit[j] * (qo_indptr_host[b + 1] - qo_indptr_host[b]) * H;
            if (end > rows) rows = end;
        }
        const size_t ml_bytes = ((size_t)rows * sizeof(float2) + 255) / 256 * 256;
        if (ml_bytes + (size_t)rows * HEAD_DIM * sizeof(float) > workspace_bytes) return cudaErrorInvalidValue;
        a.part_o = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(workspace) + ml_bytes);
    }
    a.H = H;
    a.KV = KV;
    a.G = G;
    a.TQ = TQ;
    a.P = P;
    a.p_shift = (P & (P - 1)) == 0 ? __builtin_ctz((unsigned)P) : -1;
    a.causal = is_causal ? 1 : 0;
    a.scale_log2 = sm_scale * LOG2E;

    CUtensorMap tq, tk, tv;
    {
        const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)T};
        const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)H * D * 2};
        const cuuint32_t box[3] = {64, (cuuint32_t)G, (cuuint32_t)TQ};
        if (!encode(&tq, q, 3, dims, strides, box)) return cudaErrorInvalidValue;
    }
    const bool tma_kv = P % 64 == 0;
    if (tma_kv) {
        const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)KV, (cuuint64_t)P, (cuuint64_t)(max_page + 1)};
        const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)KV * D * 2, (cuuint64_t)P * KV * D * 2};
        const cuuint32_t box[4] = {64, 1, 64, 1};
        if (!encode(&tk, k_cache, 4, dims, strides, box) || !encode(&tv, v_cache, 4, dims, strides, box))
            return cudaErrorInvalidValue;
    } else {
        memset(&tk, 0, sizeof(tk));
        memset(&tv, 0, sizeof(tv));
    }
    const unsigned grid = (unsigned)(grid_items * KV);
    return tma_kv ? launch<true>(tq, tk, tv, a, plan, grid, merge_x, stream)
                  : launch<false>(tq, tk, tv, a, plan, grid, merge_x, stream);
}
