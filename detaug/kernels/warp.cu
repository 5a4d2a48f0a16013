// Batched affine warp with antialiasing and a fused normalize / layout / dtype epilogue.
// NumPy twin: warp.py:warp_numpy (same tap positions, weights, fill handling and epilogue).
//
// One launch per batch: gridDim.y = B (sample); along x, each warp owns a chunk of
// 32 * DETAUG_WARP_PPL consecutive output pixels of its sample (row-major flattened index p):
// lane l handles p = chunk + l + 32 k, k < DETAUG_WARP_PPL, all channels in the thread. So every
// store instruction of a warp writes 32 consecutive pixels (coalesced whatever the row width
// and alignment), the source taps of a warp are neighbours (L1 hits), and the per-sample
// metadata, the division p / out_w and the reciprocals are paid once per DETAUG_WARP_PPL
// pixels of a lane. Warps past their sample's pixel count return at once. warp.py:launch_plan sizes the grid
// (blockDim.x = 256, gridDim.x = ceil(max npix / (256 * DETAUG_WARP_PPL))).
//
// Per-sample metadata (b = sample):
//   in_ptr[b]            device address of an HWC uint8 image (rows in_pitch bytes apart,
//                        each row's pixels packed)
//   meta_i[16 b + k]     k = 0 in_h, 1 in_w, 2 in_pitch (bytes per row), 3 out_h, 4 out_w,
//                        5 nx, 6 ny (taps per axis), 7 element offset of the output in `out`,
//                        8..11 cx0, cx1, cy0, cy1 (the columns / rows taps are clamped to),
//                        12 nslab, 13 offset g of the sample's doubles in `inv`, 14 projective
//                        (1: inv(M) is a homography, points map with the perspective divide),
//                        15 the output's row pitch in elements (the _pitched kernels, uint8
//                        HWC: a tile written straight into its place on a larger canvas, rows
//                        mi[15] apart instead of out_w * C; the other kernels never read it)
//   inv[g + k]           k < 6: rows 0 and 1 of inv(M) (output -> input coordinates), float64;
//                        6..9: the rect x_lo, x_hi, y_lo, y_hi (source coordinates);
//                        10..12: row 2 of inv(M) (read only when projective);
//                        then nslab slabs of (a, b, c, r, d, e, f, fill[C]) (output coordinates;
//                        d, e, f read only when projective)
//   meta_f[3 C b + k]    fill[C] (outside the rect), mean[C], std[C] (mean 0 / std 1 when not
//                        normalizing)
//
// Math: output pixel (i, j) is the mean over a < nx, b < ny of the bilinear sample at
// inv(M) @ (j + (a + 0.5) / nx, i + (b + 0.5) / ny) (a projective sample: x = ((a00 ox + a01 oy)
// + a02) / ((a20 ox + a21 oy) + a22), y alike, and a slab's value divided by (d ox + e oy) + f;
// affine samples never divide, so they compute exactly as before); with u = x - 0.5, v = y - 0.5 the taps are
// floor(u) + {0, 1} x floor(v) + {0, 1}, clamped to [cx0, cx1] x [cy0, cy1] (the image, or the
// part of it a fused chain's crops keep); a point outside the rect [x_lo, x_hi) x [y_lo, y_hi)
// (the image, or its intersection with the chain's axis-aligned canvases) takes fill, and one
// whose output position violates a slab takes that slab's fill (warp.py's module docstring). Coordinates are float64 and computed with the twin's very operations and
// roundings (no FMA contraction: x = (a00 * ox + a01 * oy) + a02, u = x - 0.5, fu = u - floor(u),
// tap offsets (a + 0.5) / nx correctly rounded), so tap positions and the inside/outside
// decision are bit-identical to warp_numpy's; weights and sums are float32.
//
// Cost per output pixel (nx = ny = 1, the common case: a separate loop chosen per sample by a
// warp-uniform branch), sm_90, C = 3: about 90 SASS instructions, 15 of them FP64 and one
// conversion, when the matrix is axis-aligned (crop / flip / resize / zoom-out / letterbox:
// the row's taps are computed once per row, see warp_body); about 110, 29 FP64 and two
// conversions, for rotations and general affines; about 200 in the first version. Where the
// cost went: no float64 division (tap offsets via a correctly rounded reciprocal, and none at
// all without antialias), no integer division per pixel (the lane steps its (i, j) by 32 pixels
// and tests the row wrap on an integer column), floor and int conversion of tap coordinates with
// the 1.5 * 2^52 rounding trick on the FP64 pipe, bytes entering the float math as subnormals
// against weights pre-scaled by 2^127 (no conversion instruction, see byte_bits), the uint8
// rounding through a round-down add, normalize as one fma with 1 / std computed once, 32-bit
// indices off per-lane base pointers. Results are unchanged up to float32 rounding of the
// epilogue (1 / std instead of a division).
// Registers: 64 (C = 3, 4 blocks of 256 per SM), <= 80 (C = 1, 3 blocks), no spills (ptxas,
// sm_90, CUDA 13.0); the _p kernels of batches with a perspective: the same counts with 52-64
// bytes of spill stores (the divide's registers). The
// tunables below were chosen by timing other values of each, given as -D options.

// Tunables (compile-time; -D options to the compile give other values):
#ifndef DETAUG_WARP_PPL  // output pixels per lane: warp.py's _PIX_PER_LANE, passed as -D
#error "compile with -DDETAUG_WARP_PPL=<warp.py's _PIX_PER_LANE>"
#endif
#ifndef DETAUG_WARP_MINB
// C = 3: resident blocks of 256 per SM asked of the compiler. 4 (64 registers): with the fused
// chain's rect and clamp, 5 blocks (48 registers) spill 24 bytes and ran slower.
#define DETAUG_WARP_MINB 4
#endif
#ifndef DETAUG_WARP_STORE_CS
#define DETAUG_WARP_STORE_CS 0  // 1: streaming (evict-first) stores of the output
#endif
#ifndef DETAUG_WARP_AXIS
#define DETAUG_WARP_AXIS 1  // 0: no axis-aligned fast path (the sweep's baseline)
#endif

template <typename T> struct Store;

template <> struct Store<unsigned char> {
    // round half up, clamp: the twin's clip(floor(v + 0.5), 0, 255). floor(clamp(y, 0, 255))
    // equals clamp(floor(y), 0, 255) (NaN -> 0 both ways); for y in [0, 255], y + 2^23 rounded
    // down is 2^23 + floor(y), whose low mantissa byte is floor(y).
    __device__ static unsigned char put(float v) {
        const float y = fminf(fmaxf(v + 0.5f, 0.0f), 255.0f);
        return static_cast<unsigned char>(__float_as_uint(__fadd_rd(y, 8388608.0f)) & 0xffu);
    }
};

template <> struct Store<float> {
    __device__ static float put(float v) { return v; }
};

// float16 is stored as its bit pattern (round to nearest even), so no header is needed.
template <> struct Store<unsigned short> {
    __device__ static unsigned short put(float v) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
    }
};

// Empty asm: the compiler cannot see through p, so it keeps p as one 64-bit base register
// (address = base + 32-bit index in one IMAD.WIDE) instead of re-associating 64-bit offsets.
template <typename T> __device__ __forceinline__ T* opaque(T* p) {
#ifdef __CUDA_ARCH__
    asm("" : "+l"(p));
#endif
    return p;
}

// Bytes enter the float math without any conversion instruction: the bits of a uint8 q read as a
// float are the subnormal q * 2^-149, and the bilinear weights are pre-scaled by 2^127, so
// w' * q' = (w * q) * 2^-22 exactly (power-of-two scalings; every sum stays in the normal range
// unless its terms are below 2^-104, far under any tolerance). The values of a pixel are thus
// carried as value * 2^-22 (fill included) and the epilogue's 1 / std is pre-scaled by 2^22.
// Subnormals must not be flushed: plain PTX mul/fma without .ftz, whatever -ftz says.
#define DETAUG_W_SCALE 1.7014118346046923e38f   // 2^127
#define DETAUG_V_SCALE 2.384185791015625e-07f   // 2^-22
#define DETAUG_V_UNSCALE 4194304.0f             // 2^22
__device__ __forceinline__ float byte_bits(unsigned char q) {
    return __int_as_float(static_cast<int>(q));
}
__device__ __forceinline__ float mul_sub(float a, float b) {  // a * b, subnormals kept
#ifdef __CUDA_ARCH__
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a * b;
#endif
}
__device__ __forceinline__ float fma_sub(float a, float b, float c) {  // a * b + c, subnormals kept
#ifdef __CUDA_ARCH__
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
#else
    return fmaf(a, b, c);
#endif
}

// floor(u) for |u| < 2^31 (as double, and as int in n), on the FP64 pipe: u + 1.5 * 2^52 rounds
// u to the nearest integer k, held in the low mantissa bits (two's complement); then step down
// where k > u. Exact.
__device__ __forceinline__ double floor_small(double u, int& n) {
    const double magic = 6755399441055744.0;  // 1.5 * 2^52
    const double t = __dadd_rn(u, magic);
    double r = __dadd_rn(t, -magic);
    n = __double2loint(t);
    if (r > u) {
        r = __dadd_rn(r, -1.0);
        n -= 1;
    }
    return r;
}

// (2 k + 1) / d correctly rounded, for small integers, from r = RN(1 / d) (Markstein: one
// residual step from a quotient within 1 ulp gives the correctly rounded quotient; checked
// exhaustively for every d = 2 n, n <= 4096), i.e. the twin's (k + 0.5) / n with d = 2 n.
__device__ __forceinline__ double tap_offset(double num, double d, double r) {
    const double q = __dmul_rn(num, r);
    const double e = __fma_rn(-q, d, num);
    return __fma_rn(e, r, q);
}

struct WarpSample {
    const unsigned char* src;
    unsigned int pitch;  // bytes per row (< 2^31, checked by launch_plan)
    int cx0, cx1, cy0, cy1;  // taps are clamped to these columns / rows
    double xlo, xhi, ylo, yhi;  // the rect, source coordinates
    double a00, a01, a02, a10, a11, a12;
    int nslab;
    const double* slabs;  // nslab x (a, b, c, r, d, e, f, fill[C]), after inv(M)'s row 2
};

// The perspective denominator (a20 ox + a21 oy) + a22 of a projective sample: row 2 of inv(M),
// read at slabs - 3 when needed.
__device__ __forceinline__ double proj_w(const WarpSample& s, double ox, double oy) {
    const double* r = s.slabs - 3;
    return __dadd_rn(__dadd_rn(__dmul_rn(__ldg(r), ox), __dmul_rn(__ldg(r + 1), oy)), __ldg(r + 2));
}

// 1 / w for the perspective divide, without a call: CUDA's correctly rounded division has a slow
// path that is a function call, and a call in the kernel made every body spill registers. The
// hardware's approximate reciprocal (about 2^-23) and two Newton steps give 1 / w within an ulp.
__device__ __forceinline__ double recip(double w) {
#ifdef __CUDA_ARCH__
    double r;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(w));
    double e = __fma_rn(-w, r, 1.0);
    r = __fma_rn(r, e, r);
    e = __fma_rn(-w, r, 1.0);
    return __fma_rn(r, e, r);
#else
    return 1.0 / w;
#endif
}

// x / w from r ~ 1 / w: the product, then one residual step (the correctly rounded quotient but
// for rare last-bit cases; w = 0 gives NaN, outside every test, as the twin's infinity is).
__device__ __forceinline__ double quot(double x, double w, double r) {
    const double q = __dmul_rn(x, r);
    return __fma_rn(__fma_rn(-q, w, x), r, q);
}

// The input point of output position (ox, oy): x = (a00 ox + a01 oy) + a02 (y alike), divided by
// w = (a20 ox + a21 oy) + a22 for a projective sample (the twin's _source_points; the quotient
// within the last bit of the twin's).
template <bool PROJ>
__device__ __forceinline__ void source_point(const WarpSample& s, double ox, double oy, double& x,
                                             double& y) {
    x = __dadd_rn(__dadd_rn(__dmul_rn(s.a00, ox), __dmul_rn(s.a01, oy)), s.a02);
    y = __dadd_rn(__dadd_rn(__dmul_rn(s.a10, ox), __dmul_rn(s.a11, oy)), s.a12);
    if (PROJ) {
        const double w = proj_w(s, ox, oy), r = recip(w);
        x = quot(x, w, r);
        y = quot(y, w, r);
    }
}

// Taps along one axis for the input coordinate t (inside the rect, so inside the image): u =
// t - 0.5, the neighbours floor(u) and floor(u) + 1 clamped to [lo, hi], and the fraction
// u - floor(u).
struct AxisTaps {
    unsigned int a, b;
    float f;
};
__device__ __forceinline__ AxisTaps axis_taps(double t, int lo, int hi) {
    const double u = __dadd_rn(t, -0.5);
    int k;  // inside, so u in [-0.5, 2^31)
    const double uf = floor_small(u, k);
    AxisTaps r;
    r.f = static_cast<float>(__dadd_rn(u, -uf));
    r.a = static_cast<unsigned int>(max(k, lo));
    r.b = static_cast<unsigned int>(min(k + 1, hi));
    return r;
}

// The bilinear blend of rows ra (weight 1 - fv, given as gv0) and rb (weight fv) at the columns
// of tx, into val (ACC: added to val), scaled by 2^-22 (see byte_bits).
template <int C, bool ACC>
__device__ __forceinline__ void blend(float (&val)[C], const unsigned char* ra,
                                      const unsigned char* rb, const AxisTaps& tx, float gv0,
                                      float fv) {
    const unsigned char* p00 = ra + static_cast<unsigned long long>(tx.a) * C;
    const unsigned char* p01 = ra + static_cast<unsigned long long>(tx.b) * C;
    const unsigned char* p10 = rb + static_cast<unsigned long long>(tx.a) * C;
    const unsigned char* p11 = rb + static_cast<unsigned long long>(tx.b) * C;
    unsigned char q00[C], q01[C], q10[C], q11[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {  // all loads first
        q00[c] = __ldg(p00 + c);
        q01[c] = __ldg(p01 + c);
        q10[c] = __ldg(p10 + c);
        q11[c] = __ldg(p11 + c);
    }
    // the weights (1 - fu)(1 - fv), fu (1 - fv), (1 - fu) fv, fu fv, each times 2^127
    // (2^127 (1 - fu) = fma(-fu, 2^127, 2^127): one rounding, as RN(1 - fu) scaled)
    const float fu = tx.f;
    const float gu0 = fmaf(-fu, DETAUG_W_SCALE, DETAUG_W_SCALE), gu1 = fu * DETAUG_W_SCALE;
    const float w00 = gu0 * gv0, w01 = gu1 * gv0, w10 = gu0 * fv, w11 = gu1 * fv;
#pragma unroll
    for (int c = 0; c < C; ++c) {
        float t = mul_sub(w00, byte_bits(q00[c]));
        t = fma_sub(w01, byte_bits(q01[c]), t);
        t = fma_sub(w10, byte_bits(q10[c]), t);
        t = fma_sub(w11, byte_bits(q11[c]), t);
        val[c] = ACC ? val[c] + t : t;
    }
}

__device__ __forceinline__ const unsigned char* row_ptr(const WarpSample& s, unsigned int r) {
    return opaque(s.src + static_cast<unsigned long long>(r) * s.pitch);
}

// Bilinear sample at input point (x, y), output position (ox, oy), into val (ACC: added to
// val), scaled by 2^-22 (see byte_bits). A violated slab gives its fill (the first one wins);
// outside the rect: fill as a whole (fs: fill * 2^-22); inside, taps clamped to the clamp
// rectangle (its edge pixels replicate).
template <int C, bool ACC, bool PROJ>
__device__ __forceinline__ void sample_point(float (&val)[C], const WarpSample& s, double x,
                                             double y, double ox, double oy,
                                             const float (&fs)[C]) {
    for (int k = 0; k < s.nslab; ++k) {  // uniform per sample; none in the common chains
        const double* sl = s.slabs + k * (7 + C);
        double v = __dadd_rn(__dadd_rn(__dmul_rn(sl[0], ox), __dmul_rn(sl[1], oy)), sl[2]);
        if (PROJ) {  // the canvas before a perspective: its slab with the divide
            const double d = __dadd_rn(__dadd_rn(__dmul_rn(sl[4], ox), __dmul_rn(sl[5], oy)), sl[6]);
            v = quot(v, d, recip(d));
        }
        if (!(v >= 0.0 && v < sl[3])) {
#pragma unroll
            for (int c = 0; c < C; ++c) {
                const float f = static_cast<float>(sl[7 + c]) * DETAUG_V_SCALE;
                val[c] = ACC ? val[c] + f : f;
            }
            return;
        }
    }
    if (!(x >= s.xlo && x < s.xhi && y >= s.ylo && y < s.yhi)) {
#pragma unroll
        for (int c = 0; c < C; ++c) val[c] = ACC ? val[c] + fs[c] : fs[c];
        return;
    }
    const AxisTaps tx = axis_taps(x, s.cx0, s.cx1);
    const AxisTaps ty = axis_taps(y, s.cy0, s.cy1);
    blend<C, ACC>(val, row_ptr(s, ty.a), row_ptr(s, ty.b), tx, 1.0f - ty.f, ty.f);
}

// value = (v - mean) / std on the scaled v (vs = v * 2^-22): fma(vs, 2^22 / std, -mean / std)
template <int C, typename OutT>
__device__ __forceinline__ void store_pixel(OutT* const (&q)[C], unsigned int idx, const float (&val)[C],
                                            const float (&k)[C], const float (&bias)[C]) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const OutT v = Store<OutT>::put(fmaf(val[c], k[c], bias[c]));
#if defined(__CUDA_ARCH__) && DETAUG_WARP_STORE_CS
        __stcs(q[c] + idx, v);
#else
        q[c][idx] = v;
#endif
    }
}

// A lane's walk over its pixels p0, p0 + 32, ...: the column as an integer (the row wrap is an
// integer test: no float64 compare or conversion per pixel) and the pixel's column and row as
// doubles (integers plus `off`, 0 or 0.5: exact).
struct LaneWalk {
    unsigned int jc, uw, step_c;  // column, out_w, columns per step (mod out_w)
    double step_cd, step_rd, off;  // step_c and the rows per step (> 0 only when out_w < 32)
    // Advance col / row by 32 pixels; true when the row changed.
    __device__ __forceinline__ bool next(double& col, double& row) {
        col = __dadd_rn(col, step_cd);
        row = __dadd_rn(row, step_rd);
        jc += step_c;
        if (jc >= uw) {  // next row: col = jc + off exactly, as (col - out_w) would be
            jc -= uw;
            col = __dadd_rn(static_cast<double>(jc), off);
            row = __dadd_rn(row, 1.0);
            return true;
        }
        return step_rd > 0.0;
    }
};

// The output rows a lane's step of 32 pixels crossed: the whole rows of the step, and one
// more where its column wrapped (jb: the column before the step).
__device__ __forceinline__ unsigned int rows_crossed(const LaneWalk& w, unsigned int jb,
                                                     unsigned int step_r) {
    return step_r + (w.jc < jb + w.step_c ? 1u : 0u);
}

// PROJ: the sample's inv(M) is a homography (meta_i[14]); the _p kernels branch once per block
// (uniform: blockIdx.y is the sample) into the body made for it.
// PITCH: rows of the output mi[15] elements apart (HWC only; a lane's pixel p = (i, j) is then
// at i * mi[15] + j * C: each step of 32 pixels adds the rows it crossed times the gap).
template <int C, typename OutT, bool CHW, bool PROJ, bool PITCH = false>
__device__ __forceinline__ void warp_body(const unsigned long long* __restrict__ in_ptr,
                                          const long long* __restrict__ meta_i,
                                          const double* __restrict__ inv,
                                          const float* __restrict__ meta_f,
                                          OutT* __restrict__ out) {
    const int b = blockIdx.y;
    const long long* mi = meta_i + 16 * b;
    const int out_h = static_cast<int>(mi[3]);
    const int out_w = static_cast<int>(mi[4]);
    const unsigned int npix = static_cast<unsigned int>(out_h) * static_cast<unsigned int>(out_w);
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int chunk =
        (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * (32u * DETAUG_WARP_PPL);
    if (chunk >= npix) return;  // whole warps leave together
    const unsigned int p0 = chunk + lane;
    // pixels of this lane: p0 + 32 k for k < n
    const int n = p0 < npix ? min(DETAUG_WARP_PPL, static_cast<int>((npix - p0 + 31u) >> 5)) : 0;

    WarpSample s;
    s.pitch = static_cast<unsigned int>(mi[2]);
    s.cx0 = static_cast<int>(mi[8]);
    s.cx1 = static_cast<int>(mi[9]);
    s.cy0 = static_cast<int>(mi[10]);
    s.cy1 = static_cast<int>(mi[11]);
    s.nslab = static_cast<int>(mi[12]);
    s.src = reinterpret_cast<const unsigned char*>(static_cast<size_t>(in_ptr[b]));
    const double* m = inv + mi[13];
    s.a00 = m[0]; s.a01 = m[1]; s.a02 = m[2];
    s.a10 = m[3]; s.a11 = m[4]; s.a12 = m[5];
    s.xlo = m[6]; s.xhi = m[7]; s.ylo = m[8]; s.yhi = m[9];
    s.slabs = m + 13;  // after inv(M)'s row 2 (m[10..12], see proj_w)
    const int nx = static_cast<int>(mi[5]);
    const int ny = static_cast<int>(mi[6]);
    const float scale = 1.0f / static_cast<float>(nx * ny);  // antialias mean
    const float* mf = meta_f + 3 * C * b;
    float fs[C], k[C], bias[C];
    OutT* q[C];  // this lane's first output element of each channel
    const unsigned int uw = static_cast<unsigned int>(out_w);
    const unsigned int i0 = p0 / uw;
    // elements between the end of an output row and the start of the next (PITCH only)
    const unsigned int gap = PITCH ? static_cast<unsigned int>(mi[15]) - uw * C : 0u;
#pragma unroll
    for (int c = 0; c < C; ++c) {
        fs[c] = mf[c] * DETAUG_V_SCALE;
        const float rstd = 1.0f / mf[2 * C + c];
        k[c] = (rstd * scale) * DETAUG_V_UNSCALE;
        bias[c] = -mf[C + c] * rstd;
        q[c] = opaque(out + mi[7] + (CHW ? c * npix + p0 : p0 * C + c) + (PITCH ? i0 * gap : 0u));
#ifdef __CUDA_ARCH__
        __builtin_assume(__isGlobal(q[c]));  // keeps STG (not generic ST) after opaque()
#endif
    }
    const unsigned int stride = CHW ? 32u : 32u * C;  // elements between this lane's pixels

    // (i, j) of p0, and the step of 32 pixels as (rows, cols) (rows > 0 only when out_w < 32)
    const unsigned int step_r = uw >= 32u ? 0u : 32u / uw;
    const double step_rd = static_cast<double>(step_r);
    const unsigned int step_c = 32u - step_r * uw;
    const unsigned int j0 = p0 - i0 * uw;
    LaneWalk walk{j0, uw, step_c, static_cast<double>(step_c), step_rd, 0.0};
    double id = static_cast<double>(i0);  // row and column as doubles (integers: exact)
    double jd = static_cast<double>(j0);

    if (nx == 1 && ny == 1) {  // uniform per sample: one bilinear tap at the pixel centre
        // the pixel centre (j + 0.5, i + 0.5), stepped exactly (integers + 0.5 in float64)
        double ox = __dadd_rn(jd, 0.5), oy = __dadd_rn(id, 0.5);
        walk.off = 0.5;
        unsigned int idx = 0;
        if (DETAUG_WARP_AXIS && s.a01 == 0.0 && s.a10 == 0.0 && s.nslab == 0 && !PROJ) {
            // Axis-aligned (crop, flip, resize, zoom-out, letterbox; uniform per sample): x
            // depends on the column alone and y on the row alone. a01 * oy and a10 * ox are +-0,
            // and t + (+-0) = t for t != 0, so x = a00 * ox + a02 and y = a11 * oy + a12 are
            // bit-identical to the general formula (a00, a11 != 0 for an invertible matrix,
            // ox, oy > 0). The row's taps are computed when the lane's row changes (once per
            // out_w / 32 pixels of the lane when out_w >= 32), the column's per pixel.
            bool row_in = false;
            const unsigned char *ra = s.src, *rb = s.src;
            float gv0 = 0.0f, fv = 0.0f;
            bool new_row = true;
#pragma unroll 1
            for (int kk = 0; kk < n; ++kk) {
                if (new_row) {
                    const double y = __dadd_rn(__dmul_rn(s.a11, oy), s.a12);
                    row_in = y >= s.ylo && y < s.yhi;
                    if (row_in) {
                        const AxisTaps ty = axis_taps(y, s.cy0, s.cy1);
                        ra = row_ptr(s, ty.a);
                        rb = row_ptr(s, ty.b);
                        fv = ty.f;
                        gv0 = 1.0f - fv;
                    }
                }
                const double x = __dadd_rn(__dmul_rn(s.a00, ox), s.a02);
                float val[C];
                if (row_in && x >= s.xlo && x < s.xhi) {
                    blend<C, false>(val, ra, rb, axis_taps(x, s.cx0, s.cx1), gv0, fv);
                } else {
#pragma unroll
                    for (int c = 0; c < C; ++c) val[c] = fs[c];
                }
                store_pixel<C, OutT>(q, idx, val, k, bias);
                const unsigned int jb = walk.jc;
                new_row = walk.next(ox, oy);
                idx += stride + (PITCH ? rows_crossed(walk, jb, step_r) * gap : 0u);
            }
            return;
        }
#pragma unroll 1
        for (int kk = 0; kk < n; ++kk) {
            double x, y;
            source_point<PROJ>(s, ox, oy, x, y);
            float val[C];
            sample_point<C, false, PROJ>(val, s, x, y, ox, oy, fs);
            store_pixel<C, OutT>(q, idx, val, k, bias);
            const unsigned int jb = walk.jc;
            walk.next(ox, oy);
            // next pixel of this lane: 32 further
            idx += stride + (PITCH ? rows_crossed(walk, jb, step_r) * gap : 0u);
        }
        return;
    }

    // antialias: nx * ny supersampling taps per pixel, offsets (t + 0.5) / n correctly rounded
    const double dx = static_cast<double>(2 * nx), dy = static_cast<double>(2 * ny);
    const double rx = 1.0 / dx, ry = 1.0 / dy;
    unsigned int idx = 0;
    for (int kk = 0; kk < n; ++kk) {
        float acc[C];
#pragma unroll
        for (int c = 0; c < C; ++c) acc[c] = 0.0f;
        double numy = 1.0;  // 2 tb + 1
        for (int tb = 0; tb < ny; ++tb, numy = __dadd_rn(numy, 2.0)) {
            const double oy = __dadd_rn(id, tap_offset(numy, dy, ry));
            const double ty = __dmul_rn(s.a01, oy), ty1 = __dmul_rn(s.a11, oy);
            double numx = 1.0;
            for (int ta = 0; ta < nx; ++ta, numx = __dadd_rn(numx, 2.0)) {
                const double ox = __dadd_rn(jd, tap_offset(numx, dx, rx));
                double x = __dadd_rn(__dadd_rn(__dmul_rn(s.a00, ox), ty), s.a02);
                double y = __dadd_rn(__dadd_rn(__dmul_rn(s.a10, ox), ty1), s.a12);
                if (PROJ) {
                    const double w = proj_w(s, ox, oy), r = recip(w);
                    x = quot(x, w, r);
                    y = quot(y, w, r);
                }
                sample_point<C, true, PROJ>(acc, s, x, y, ox, oy, fs);
            }
        }
        store_pixel<C, OutT>(q, idx, acc, k, bias);
        const unsigned int jb = walk.jc;
        walk.next(jd, id);
        idx += stride + (PITCH ? rows_crossed(walk, jb, step_r) * gap : 0u);
    }
}

// Two kernels per type: NAME for batches of affine samples only (the body without any divide:
// compiled exactly as before perspectives existed, 64 / 80 registers and no spills), NAME_p for
// a batch holding projective samples (one launch still: each block takes the body made for its
// sample; that kernel spills a little where the divide adds registers). warp.py's launch_plan
// picks the name.
#define DETAUG_WARP_KERNEL(NAME, C, OUT_T, CHW)                                               \
    extern "C" __global__ void __launch_bounds__(256, C == 3 ? DETAUG_WARP_MINB : 3) NAME(                     \
        const unsigned long long* __restrict__ in_ptr, const long long* __restrict__ meta_i,  \
        const double* __restrict__ inv, const float* __restrict__ meta_f,                     \
        OUT_T* __restrict__ out) {                                                            \
        warp_body<C, OUT_T, CHW, false>(in_ptr, meta_i, inv, meta_f, out);                    \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(256, C == 3 ? DETAUG_WARP_MINB : 3) NAME##_p(                 \
        const unsigned long long* __restrict__ in_ptr, const long long* __restrict__ meta_i,  \
        const double* __restrict__ inv, const float* __restrict__ meta_f,                     \
        OUT_T* __restrict__ out) {                                                            \
        if (meta_i[16 * blockIdx.y + 14])                                                     \
            warp_body<C, OUT_T, CHW, true>(in_ptr, meta_i, inv, meta_f, out);                 \
        else                                                                                  \
            warp_body<C, OUT_T, CHW, false>(in_ptr, meta_i, inv, meta_f, out);                \
    }

DETAUG_WARP_KERNEL(warp_u8_hwc_c1, 1, unsigned char, false)
DETAUG_WARP_KERNEL(warp_u8_hwc_c3, 3, unsigned char, false)
DETAUG_WARP_KERNEL(warp_u8_chw_c1, 1, unsigned char, true)
DETAUG_WARP_KERNEL(warp_u8_chw_c3, 3, unsigned char, true)
DETAUG_WARP_KERNEL(warp_f32_hwc_c1, 1, float, false)
DETAUG_WARP_KERNEL(warp_f32_hwc_c3, 3, float, false)
DETAUG_WARP_KERNEL(warp_f32_chw_c1, 1, float, true)
DETAUG_WARP_KERNEL(warp_f32_chw_c3, 3, float, true)
DETAUG_WARP_KERNEL(warp_f16_hwc_c1, 1, unsigned short, false)
DETAUG_WARP_KERNEL(warp_f16_hwc_c3, 3, unsigned short, false)
DETAUG_WARP_KERNEL(warp_f16_chw_c1, 1, unsigned short, true)
DETAUG_WARP_KERNEL(warp_f16_chw_c3, 3, unsigned short, true)

// The uint8 HWC kernels that write each sample into a pitched place (meta_i[15]): a mosaic's
// tiles warped straight into their canvas (warp_canvas.py), one launch for the batch's tiles.
#define DETAUG_WARP_PITCHED_KERNEL(NAME, C)                                                   \
    extern "C" __global__ void __launch_bounds__(256, C == 3 ? DETAUG_WARP_MINB : 3) NAME(    \
        const unsigned long long* __restrict__ in_ptr, const long long* __restrict__ meta_i,  \
        const double* __restrict__ inv, const float* __restrict__ meta_f,                     \
        unsigned char* __restrict__ out) {                                                    \
        warp_body<C, unsigned char, false, false, true>(in_ptr, meta_i, inv, meta_f, out);    \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(256, C == 3 ? DETAUG_WARP_MINB : 3) NAME##_p( \
        const unsigned long long* __restrict__ in_ptr, const long long* __restrict__ meta_i,  \
        const double* __restrict__ inv, const float* __restrict__ meta_f,                     \
        unsigned char* __restrict__ out) {                                                    \
        if (meta_i[16 * blockIdx.y + 14])                                                     \
            warp_body<C, unsigned char, false, true, true>(in_ptr, meta_i, inv, meta_f, out); \
        else                                                                                  \
            warp_body<C, unsigned char, false, false, true>(in_ptr, meta_i, inv, meta_f, out);\
    }

DETAUG_WARP_PITCHED_KERNEL(warp_u8_hwc_c1_pitched, 1)
DETAUG_WARP_PITCHED_KERNEL(warp_u8_hwc_c3_pitched, 3)
