// Reference paged GQA decode for Hopper (sm_90a) and Blackwell (sm_100a: tasks/reference/b200 links here; the
// bulk copies, mbarriers, ldmatrix / movmatrix and mma.sync it uses run unchanged there): one query token per
// sequence against its paged KV cache.
// q, output [B, H, D] bf16; k_cache, v_cache [pages, P, KV, D] bf16 (NHD); sequence b owns the pages
// kv_indices[kv_indptr[b] .. kv_indptr[b+1]-1] in token order, the last one holding kv_last_page_len[b]
// tokens. output[b, h] = softmax(q[b, h]·Kᵀ·sm_scale)·V with KV head h / (H / KV); lse[b, h] natural log.
//
// Design (persistent split-KV / flash-decoding, balanced on the host, merged by a second kernel)
//  * Work split: the launcher reads the host copies of the page tables, lays all B sequences end to end
//    (T tokens in all) and gives CTA c of n the tokens [c·T/n, (c+1)·T/n) of that stream (n = number of
//    SMs, fewer when the workspace has not n + B - 1 partial slots: 127 for B = 1, H = 32): every CTA
//    moves the same number of bytes whatever the length distribution (one long sequence, power law,
//    B = 1). The plan (each CTA's first sequence and offset) travels as a kernel parameter
//    (__grid_constant__), so nothing is copied and the launch is capturable. A CTA walks its
//    range sequence by sequence ("segments"); each segment gives one partial result per head, written to
//    the workspace at slot (c + b) (unique: a later CTA only touches later sequences), or, when the CTA
//    holds the whole sequence, the final output and LSE directly.
//  * One CTA per SM covers all KV heads of its tokens, so the K (and V) data of one token is one
//    contiguous run of KV·D·2 bytes (2 KiB for KV = 8): one bulk asynchronous copy
//    (cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes, SASS UBLKCP) per token for K and
//    one for V, for any page size. Rows land in shared memory 16 B apart from a multiple of 128 B
//    (stride KV·256 + 16), so the ldmatrix reads below are free of bank conflicts.
//  * Warp-specialised: warp KV is the producer (lanes compute each token's page address from kv_indices,
//    one block ahead; lane 0 arms the stage's full barrier with expect_tx; the lanes issue the copies),
//    warps 0..KV-1 are consumers, warp j serving KV head j and its G = H / KV query heads.
//    Ring of 3 stages of TB = 128 / KV tokens (K and V: ~64 KiB a stage), full/empty mbarriers. A block
//    never spans two segments; its slots past the segment's end repeat the segment's last token (finite
//    data, masked to -inf in the softmax), so every stage is always filled with TB tokens.
//  * Consumers use tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate) with the roles turned round so
//    that the 16-row side holds tokens and only the 8-wide side pads heads: Sᵀ[16 tokens × 8 heads] =
//    K·Qᵀ (A = K rows by ldmatrix, B = Q fragments held in registers), online softmax in base 2 per head
//    (column), Pᵀ packed to bf16 and transposed into the B-fragment layout with movmatrix, then
//    Oᵀ[128 × 8] += Vᵀ·Pᵀ (A = V by ldmatrix.trans). Query heads past G are zero columns.
//  * Merge kernel: one CTA per (b, h) (it returns at once when one CTA held all of b): finds the CTAs
//    c0..c1 that touched b by binary search in the plan, then a log-sum-exp weighted sum of their partial
//    (o, m, l), split over 8 warps; output bf16 and lse = (m + log2 l)·ln 2.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace {

constexpr int HEAD_DIM = 128;
constexpr int STAGES = 3;
constexpr int MAX_CTAS = 256;
constexpr int MERGE_WARPS = 8;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// The host's plan: CTA c starts at token off0[c] of sequence b0[c] and takes tokens
// [c·total/ctas, (c+1)·total/ctas) of the concatenated sequences.
struct Plan {
    int total;
    int ctas;
    int b0[MAX_CTAS];
    int off0[MAX_CTAS];
};

struct Args {
    const __nv_bfloat16* q;
    const __nv_bfloat16* k;
    const __nv_bfloat16* v;
    const int* indptr;
    const int* indices;
    const int* last;
    __nv_bfloat16* out;
    float* lse;
    float2* part_ml;   // [slots][H] (m in base 2, l)
    float* part_o;     // [slots][H][D], unnormalised
    int B, H, G, P, p_shift;   // p_shift: log2 P, or -1 when P is not a power of two
    float scale_log2;
};

template <int KV>
struct Config {
    static constexpr int CONSUMERS = KV;                      // one warp per KV head
    static constexpr int THREADS = 32 * (CONSUMERS + 1);      // + the producer warp
    static constexpr int TB = 128 / KV;                       // tokens per stage
    static constexpr int SUBS = TB / 16;                      // 16-token MMA blocks per warp per stage
    static constexpr int TOKEN_BYTES = KV * HEAD_DIM * 2;     // one token's K (or V), all KV heads
    static constexpr int ROW = TOKEN_BYTES + 16;              // padded shared-memory row
    static constexpr int STAGE_HALF = TB * ROW;               // K (or V) part of a stage
    static constexpr int STAGE_BYTES = 2 * STAGE_HALF;
    static constexpr uint32_t TX_BYTES = 2u * TB * TOKEN_BYTES;
    static constexpr int PER_LANE = (TB + 31) / 32;           // tokens per producer lane
    static constexpr size_t SMEM = (size_t)STAGES * STAGE_BYTES + 2 * STAGES * 8;
};

// ------------------------------------------------------------------------------------------------
// PTX wrappers
// ------------------------------------------------------------------------------------------------
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

// Bulk asynchronous copy global -> shared, completion counted in bytes on the mbarrier.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// Transposes an 8x8 b16 matrix held in the standard fragment layout (lane: row lane/4, cols 2(lane%4)+{0,1}).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

// D[16x8] += A[16x16] · B[16x8], bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

// ------------------------------------------------------------------------------------------------
// Walking a CTA's token range: segments (one per sequence touched) cut into blocks of TB tokens.
// The producer and the consumers run the same walk, so the ring's block counter agrees on both sides.
// ------------------------------------------------------------------------------------------------
struct Cursor {
    int b;       // sequence
    int pbase;   // kv_indptr[b]
    int len;     // its length in tokens
    int t0, t1;  // this CTA's segment of it: tokens [t0, t1)
    int t;       // first token of the current block
    int rem;     // tokens of the CTA's range after this segment
    bool valid;
};

__device__ __forceinline__ void cursor_open(Cursor& c, const Args& a, int b, int off, int rem) {
    c.valid = false;
    while (rem > 0 && b < a.B) {
        const int p0 = __ldg(a.indptr + b), p1 = __ldg(a.indptr + b + 1), lp = __ldg(a.last + b);
        const int len = (p1 - p0 - 1) * a.P + lp;
        const int t1 = min(len, off + rem);
        if (t1 > off) {
            c.b = b;
            c.pbase = p0;
            c.len = len;
            c.t0 = off;
            c.t1 = t1;
            c.t = off;
            c.rem = rem - (t1 - off);
            c.valid = true;
            return;
        }
        ++b;
        off = 0;
    }
}

__device__ __forceinline__ void cursor_begin(Cursor& c, const Args& a, const Plan& plan) {
    const int cta = blockIdx.x;
    const long long s0 = (long long)cta * plan.total / plan.ctas;
    const long long s1 = (long long)(cta + 1) * plan.total / plan.ctas;
    cursor_open(c, a, plan.b0[cta], plan.off0[cta], (int)(s1 - s0));
}

template <int TB>
__device__ __forceinline__ void cursor_next(Cursor& c, const Args& a) {
    c.t += TB;
    if (c.t < c.t1) return;
    cursor_open(c, a, c.b + 1, 0, c.rem);
}

// Element offset of token t of the cursor's sequence in the cache (for KV head 0).
__device__ __forceinline__ size_t token_offset(const Cursor& c, const Args& a, int t, int kv_d) {
    int page_idx, slot;
    if (a.p_shift >= 0) {
        page_idx = t >> a.p_shift;
        slot = t & (a.P - 1);
    } else {
        page_idx = t / a.P;
        slot = t - page_idx * a.P;
    }
    const int page = __ldg(a.indices + c.pbase + page_idx);
    return ((size_t)page * a.P + slot) * (size_t)kv_d;
}

// ------------------------------------------------------------------------------------------------
// Main kernel
// ------------------------------------------------------------------------------------------------
template <int KV>
__global__ void __launch_bounds__(Config<KV>::THREADS, 1)
gqa_paged_decode_kernel(const __grid_constant__ Args a, const __grid_constant__ Plan plan) {
    using C = Config<KV>;
    constexpr int TB = C::TB, ROW = C::ROW;
    extern __shared__ __align__(128) uint8_t smem_raw[];
    const uint32_t smem = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t full_bar = smem + STAGES * C::STAGE_BYTES;   // STAGES barriers
    const uint32_t empty_bar = full_bar + 8 * STAGES;            // STAGES barriers

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_bar + 8 * s, 1);
            mbar_init(empty_bar + 8 * s, C::CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == C::CONSUMERS) {
        // ---------------- producer warp ----------------
        // Lane l copies tokens l, l + 32, ... of each block; addresses are computed one block ahead so the
        // kv_indices loads overlap the wait for a free stage and the previous block's copies.
        constexpr int KVD = KV * HEAD_DIM;
        Cursor cur;
        cursor_begin(cur, a, plan);
        if (!cur.valid) return;
        size_t src[C::PER_LANE];
#pragma unroll
        for (int j = 0; j < C::PER_LANE; ++j) {
            const int tt = lane + 32 * j;
            src[j] = (tt < TB) ? token_offset(cur, a, min(cur.t + tt, cur.t1 - 1), KVD) : 0;
        }
        for (int i = 0; cur.valid; ++i) {
            Cursor nxt = cur;
            cursor_next<TB>(nxt, a);
            size_t src_next[C::PER_LANE];
#pragma unroll
            for (int j = 0; j < C::PER_LANE; ++j) {
                const int tt = lane + 32 * j;
                src_next[j] = (nxt.valid && tt < TB) ? token_offset(nxt, a, min(nxt.t + tt, nxt.t1 - 1), KVD) : 0;
            }
            const int s = i % STAGES;
            if (i >= STAGES) mbar_wait(empty_bar + 8 * s, (uint32_t)((i / STAGES) - 1) & 1);
            if (lane == 0) mbar_arrive_expect_tx(full_bar + 8 * s, C::TX_BYTES);
            __syncwarp();
            const uint32_t k_dst = smem + s * C::STAGE_BYTES;
            const uint32_t v_dst = k_dst + C::STAGE_HALF;
#pragma unroll
            for (int j = 0; j < C::PER_LANE; ++j) {
                const int tt = lane + 32 * j;
                if (tt < TB) {
                    // Tokens past the segment repeat its last token (finite data, masked in the softmax).
                    bulk_load(k_dst + tt * ROW, a.k + src[j], C::TOKEN_BYTES, full_bar + 8 * s);
                    bulk_load(v_dst + tt * ROW, a.v + src[j], C::TOKEN_BYTES, full_bar + 8 * s);
                }
            }
            cur = nxt;
#pragma unroll
            for (int j = 0; j < C::PER_LANE; ++j) src[j] = src_next[j];
        }
        return;
    }

    // ---------------- consumer warps: warp = KV head ----------------
    const int G = a.G, H = a.H;
    const int r = lane >> 2, cq = lane & 3;       // fragment row (token / d / head) and column pair
    const int mi = lane >> 3, mr = lane & 7;      // ldmatrix: which 8x8 matrix this lane addresses, which row
    // K as the A operand (rows = tokens, k = d): matrices (tok 0-7, d 0-7), (tok 8-15, d 0-7),
    // (tok 0-7, d 8-15), (tok 8-15, d 8-15); + 32 B per 16-wide k step.
    const uint32_t k_lane = (uint32_t)(((mi & 1) * 8 + mr) * ROW + warp * HEAD_DIM * 2 + (mi >> 1) * 16);
    // Vᵀ as the A operand through ldmatrix.trans (rows = d, k = tokens): matrices (tok 0-7, d 0-7),
    // (tok 0-7, d 8-15), (tok 8-15, d 0-7), (tok 8-15, d 8-15); + 32 B per 16 rows of d.
    const uint32_t v_lane = (uint32_t)(((mi >> 1) * 8 + mr) * ROW + warp * HEAD_DIM * 2 + (mi & 1) * 16);
    const float sl2 = a.scale_log2;

    uint32_t qf[8][2];     // Qᵀ as the B operand: head r, d = 16 ks + 2 cq (+8)
    float o[8][4];         // Oᵀ: d = 16 mt + r (+8), heads 2 cq, 2 cq + 1
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    Cursor cur;
    cursor_begin(cur, a, plan);
    for (int i = 0; cur.valid; ++i) {
        if (cur.t == cur.t0) {
            // New segment: this sequence's queries, fresh softmax state.
            const bool qrow = r < G;
            const uint32_t* qp = reinterpret_cast<const uint32_t*>(
                a.q + ((size_t)cur.b * H + warp * G + (qrow ? r : 0)) * HEAD_DIM + 2 * cq);
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                qf[ks][0] = qrow ? __ldg(qp + ks * 8) : 0u;
                qf[ks][1] = qrow ? __ldg(qp + ks * 8 + 4) : 0u;
            }
#pragma unroll
            for (int mt = 0; mt < 8; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[mt][e] = 0.f;
            m0 = m1 = -INFINITY;
            l0 = l1 = 0.f;
        }

        const int s = i % STAGES;
        mbar_wait(full_bar + 8 * s, (uint32_t)(i / STAGES) & 1);
        const uint32_t k_base = smem + s * C::STAGE_BYTES;
        const uint32_t v_base = k_base + C::STAGE_HALF;

#pragma unroll
        for (int sub = 0; sub < C::SUBS; ++sub) {
            const int tb = cur.t + sub * 16;
            if (tb < cur.t1) {
                // Sᵀ = K·Qᵀ over D in 8 k-steps (two accumulators to halve the dependent chain).
                float sa[4] = {0.f, 0.f, 0.f, 0.f}, sb[4] = {0.f, 0.f, 0.f, 0.f};
                const uint32_t ka = k_base + sub * 16 * ROW + k_lane;
#pragma unroll
                for (int ks = 0; ks < 8; ++ks) {
                    uint32_t af[4];
                    ldsm_x4(af, ka + ks * 32);
                    if (ks & 1)
                        mma_bf16(sb, af, qf[ks][0], qf[ks][1]);
                    else
                        mma_bf16(sa, af, qf[ks][0], qf[ks][1]);
                }
                // Scores in base 2; tokens past the segment are masked.
                const bool va = tb + r < cur.t1, vb = tb + r + 8 < cur.t1;
                const float x0 = va ? (sa[0] + sb[0]) * sl2 : -INFINITY;   // token r,     head 2cq
                const float x1 = va ? (sa[1] + sb[1]) * sl2 : -INFINITY;   // token r,     head 2cq+1
                const float x2 = vb ? (sa[2] + sb[2]) * sl2 : -INFINITY;   // token r + 8, head 2cq
                const float x3 = vb ? (sa[3] + sb[3]) * sl2 : -INFINITY;   // token r + 8, head 2cq+1
                float mx0 = fmaxf(x0, x2), mx1 = fmaxf(x1, x3);
#pragma unroll
                for (int sh = 4; sh < 32; sh <<= 1) {
                    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, sh));
                    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, sh));
                }
                // Token tb (r = 0) is always inside the segment, so the new maxima are finite.
                const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
                const float al0 = exp2_approx(m0 - mn0), al1 = exp2_approx(m1 - mn1);
                const float p0 = exp2_approx(x0 - mn0), p1 = exp2_approx(x1 - mn1);
                const float p2 = exp2_approx(x2 - mn0), p3 = exp2_approx(x3 - mn1);
                l0 = l0 * al0 + (p0 + p2);
                l1 = l1 * al1 + (p1 + p3);
                m0 = mn0;
                m1 = mn1;
#pragma unroll
                for (int mt = 0; mt < 8; ++mt) {
                    o[mt][0] *= al0;
                    o[mt][1] *= al1;
                    o[mt][2] *= al0;
                    o[mt][3] *= al1;
                }
                // Pᵀ (tokens x heads) in the B-fragment layout: transpose the two 8x8 halves.
                const uint32_t pb0 = movmatrix_trans(pack_bf16(p0, p1));
                const uint32_t pb1 = movmatrix_trans(pack_bf16(p2, p3));
                const uint32_t va_addr = v_base + sub * 16 * ROW + v_lane;
#pragma unroll
                for (int mt = 0; mt < 8; ++mt) {
                    uint32_t af[4];
                    ldsm_x4_trans(af, va_addr + mt * 32);
                    mma_bf16(o[mt], af, pb0, pb1);
                }
            }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar + 8 * s);

        if (cur.t + TB >= cur.t1) {
            // ---------------- segment epilogue ----------------
#pragma unroll
            for (int sh = 4; sh < 32; sh <<= 1) {
                l0 += __shfl_xor_sync(0xffffffffu, l0, sh);
                l1 += __shfl_xor_sync(0xffffffffu, l1, sh);
            }
            // Lanes pair up (r even with r + 1) so that each holds two consecutive d of one head.
            const int odd = r & 1;
            const int hh = 2 * cq + odd;
            const bool ok = hh < G;
            const int h = warp * G + hh;
            const float ls = odd ? l1 : l0, ms = odd ? m1 : m0;
            const bool whole = cur.t0 == 0 && cur.t1 == cur.len;
            const size_t row_bh = (size_t)cur.b * H + h;
            const size_t slot_h = ((size_t)blockIdx.x + cur.b) * H + h;
            const float inv = 1.f / ls;
#pragma unroll
            for (int mt = 0; mt < 8; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const float v0 = o[mt][2 * half], v1 = o[mt][2 * half + 1];
                    const float recv = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
                    const float e0 = odd ? recv : v0, e1 = odd ? v1 : recv;
                    const int d = 16 * mt + 8 * half + (r & ~1);
                    if (ok) {
                        if (whole)
                            *reinterpret_cast<uint32_t*>(a.out + row_bh * HEAD_DIM + d) = pack_bf16(e0 * inv, e1 * inv);
                        else
                            *reinterpret_cast<float2*>(a.part_o + slot_h * HEAD_DIM + d) = make_float2(e0, e1);
                    }
                }
            if (ok && r < 2) {
                if (whole)
                    a.lse[row_bh] = (ms + __log2f(ls)) * LN2;
                else
                    a.part_ml[slot_h] = make_float2(ms, ls);
            }
        }
        cursor_next<TB>(cur, a);
    }
}

// ------------------------------------------------------------------------------------------------
// Merge kernel: one CTA per (b, h); sequences held by a single CTA were written by the main kernel.
// ------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(MERGE_WARPS * 32)
gqa_paged_decode_merge(const __grid_constant__ Args a, const __grid_constant__ Plan plan) {
    const int b = blockIdx.x / a.H, h = blockIdx.x % a.H;
    // c1: the last CTA starting at or before sequence b's end; c0: the CTA holding b's first token.
    int lo = 0, hi = plan.ctas - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (plan.b0[mid] <= b) lo = mid; else hi = mid - 1;
    }
    const int c1 = lo;
    lo = 0;
    hi = c1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (plan.b0[mid] < b || (plan.b0[mid] == b && plan.off0[mid] == 0)) lo = mid; else hi = mid - 1;
    }
    const int c0 = lo;
    if (c0 == c1) return;

    __shared__ float4 acc_s[MERGE_WARPS][32];
    __shared__ float l_s[MERGE_WARPS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t H = a.H;
    // The maximum over all partials (every warp computes it).
    float mx = -INFINITY;
    for (int c = c0 + lane; c <= c1; c += 32) mx = fmaxf(mx, a.part_ml[((size_t)c + b) * H + h].x);
#pragma unroll
    for (int sh = 16; sh > 0; sh >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, sh));
    // Each warp sums every MERGE_WARPS-th partial; lane holds d = 4 lane .. 4 lane + 3.
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float lsum = 0.f;
#pragma unroll 4
    for (int c = c0 + warp; c <= c1; c += MERGE_WARPS) {
        const size_t slot_h = ((size_t)c + b) * H + h;
        const float2 ml = a.part_ml[slot_h];
        const float w = exp2_approx(ml.x - mx);
        const float4 ov = reinterpret_cast<const float4*>(a.part_o + slot_h * HEAD_DIM)[lane];
        lsum += w * ml.y;
        acc.x += w * ov.x;
        acc.y += w * ov.y;
        acc.z += w * ov.z;
        acc.w += w * ov.w;
    }
    acc_s[warp][lane] = acc;
    if (lane == 0) l_s[warp] = lsum;
    __syncthreads();
    if (warp == 0) {
        float4 t = acc_s[0][lane];
        float lt = l_s[0];
#pragma unroll
        for (int w = 1; w < MERGE_WARPS; ++w) {
            const float4 u = acc_s[w][lane];
            t.x += u.x;
            t.y += u.y;
            t.z += u.z;
            t.w += u.w;
            lt += l_s[w];
        }
        const float inv = 1.f / lt;
        const size_t row = (size_t)b * H + h;
        uint2 packed;
        packed.x = pack_bf16(t.x * inv, t.y * inv);
        packed.y = pack_bf16(t.z * inv, t.w * inv);
        reinterpret_cast<uint2*>(a.out + row * HEAD_DIM)[lane] = packed;
        if (lane == 0) a.lse[row] = (mx + __log2f(lt)) * LN2;
    }
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------
template <int KV>
cudaError_t launch(const Args& a, const Plan& plan, cudaStream_t stream) {
    using C = Config<KV>;
    cudaError_t err = cudaFuncSetAttribute(gqa_paged_decode_kernel<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)C::SMEM);
    if (err != cudaSuccess) return err;
    gqa_paged_decode_kernel<KV><<<plan.ctas, C::THREADS, C::SMEM, stream>>>(a, plan);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    gqa_paged_decode_merge<<<a.B * a.H, MERGE_WARPS * 32, 0, stream>>>(a, plan);
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t ptxbench_gqa_paged_decode(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                                 const __nv_bfloat16* v_cache, const int* kv_indptr,
                                                 const int* kv_indices, const int* kv_last_page_len,
                                                 const int* kv_indptr_host, const int* kv_indices_host,
                                                 const int* kv_last_page_len_host, __nv_bfloat16* output, float* lse,
                                                 int B, int H, int KV, int D, int P, float sm_scale, void* workspace,
                                                 size_t workspace_bytes, cudaStream_t stream) {
    (void)kv_indices_host;
    if (D != HEAD_DIM || B <= 0 || H <= 0 || KV <= 0 || P <= 0 || H % KV != 0 || H / KV > 8 ||
        (KV != 1 && KV != 2 && KV != 4 && KV != 8) || (long long)B * H > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    if (!q || !k_cache || !v_cache || !kv_indptr || !kv_indices || !kv_last_page_len || !kv_indptr_host ||
        !kv_last_page_len_host || !output || !lse || !workspace)
        return cudaErrorInvalidValue;
    if (((reinterpret_cast<uintptr_t>(k_cache) | reinterpret_cast<uintptr_t>(v_cache)) & 15) ||
        (reinterpret_cast<uintptr_t>(q) & 3) || (reinterpret_cast<uintptr_t>(output) & 7) ||
        (reinterpret_cast<uintptr_t>(workspace) & 15))
        return cudaErrorInvalidValue;

    // Sequence lengths from the host copy of the page tables.
    long long total = 0;
    for (int b = 0; b < B; ++b) {
        const int pages = kv_indptr_host[b + 1] - kv_indptr_host[b];
        const int last = kv_last_page_len_host[b];
        if (pages < 1 || last < 1 || last > P) return cudaErrorInvalidValue;
        total += (long long)(pages - 1) * P + last;
    }
    if (total > 0x7fffffffLL) return cudaErrorInvalidValue;

    // One CTA per SM, as many as the workspace has partial slots for (slots = ctas + B - 1).
    int device = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    const size_t slot_bytes = (size_t)H * (HEAD_DIM + 2) * sizeof(float);
    const size_t ml_align = 256;
    if (workspace_bytes < ml_align) return cudaErrorInvalidValue;
    const long long max_slots = (long long)((workspace_bytes - ml_align) / slot_bytes);
    long long ctas = sms < 1 ? 1 : sms;
    ctas = ctas < MAX_CTAS ? ctas : MAX_CTAS;
    ctas = ctas < total ? ctas : total;
    ctas = ctas < max_slots - B + 1 ? ctas : max_slots - B + 1;
    if (ctas < 1) return cudaErrorInvalidValue;

    Plan plan{};
    plan.total = (int)total;
    plan.ctas = (int)ctas;
    {
        int b = 0;
        long long seq_start = 0;   // first token of sequence b in the concatenation
        long long seq_len = (long long)(kv_indptr_host[1] - kv_indptr_host[0] - 1) * P + kv_last_page_len_host[0];
        for (int c = 0; c < plan.ctas; ++c) {
            const long long pos = (long long)c * total / ctas;
            while (pos >= seq_start + seq_len) {
                seq_start += seq_len;
                ++b;
                seq_len = (long long)(kv_indptr_host[b + 1] - kv_indptr_host[b] - 1) * P + kv_last_page_len_host[b];
            }
            plan.b0[c] = b;
            plan.off0[c] = (int)(pos - seq_start);
        }
    }

    const size_t slots = (size_t)ctas + B - 1;
    const size_t ml_bytes = (slots * H * sizeof(float2) + ml_align - 1) / ml_align * ml_align;
    Args a;
    a.q = q;
    a.k = k_cache;
    a.v = v_cache;
    a.indptr = kv_indptr;
    a.indices = kv_indices;
    a.last = kv_last_page_len;
    a.out = output;
    a.lse = lse;
    a.part_ml = reinterpret_cast<float2*>(workspace);
    a.part_o = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(workspace) + ml_bytes);
    if (ml_bytes + slots * H * HEAD_DIM * sizeof(float) > workspace_bytes) return cudaErrorInvalidValue;
    a.B = B;
    a.H = H;
    a.G = H / KV;
    a.P = P;
    a.p_shift = (P & (P - 1)) == 0 ? __builtin_ctz((unsigned)P) : -1;
    a.scale_log2 = sm_scale * LOG2E;

    switch (KV) {
        case 1: return launch<1>(a, plan, stream);
        case 2: return launch<2>(a, plan, stream);
        case 4: return launch<4>(a, plan, stream);
        case 8: return launch<8>(a, plan, stream);
        default: return cudaErrorInvalidValue;
    }
}
