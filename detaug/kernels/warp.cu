// Batched affine warp with antialiasing and a fused normalize / layout / dtype epilogue.
// NumPy twin: warp.py:warp_numpy (same tap positions, weights, fill handling and epilogue).
//
// One launch per batch: gridDim.y = B (sample), gridDim.x * blockDim.x >= the largest output
// pixel count; one thread per output pixel, all channels in the thread. Threads past their
// sample's pixel count return at once.
//
// Per-sample metadata (b = sample):
//   in_ptr[b]            device address of a C-contiguous HWC uint8 image
//   meta_i[8 b + k]      k = 0 in_h, 1 in_w, 2 in_pitch (bytes per row), 3 out_h, 4 out_w,
//                        5 nx, 6 ny (taps per axis), 7 element offset of the output in `out`
//   inv[6 b + k]         rows 0 and 1 of inv(M) (output -> input coordinates), float64
//   meta_f[3 C b + k]    fill[C], mean[C], std[C] (mean 0 / std 1 when not normalizing)
//
// Math: output pixel (i, j) is the mean over a < nx, b < ny of the bilinear sample at
// inv(M) @ (j + (a + 0.5) / nx, i + (b + 0.5) / ny); with u = x - 0.5, v = y - 0.5 the taps are
// floor(u) + {0, 1} x floor(v) + {0, 1}, clamped to the image; a point outside [0,W)x[0,H) takes fill. Coordinates are
// float64 (so tap positions equal the twin's), weights and sums float32.

template <typename T> struct Store;

template <> struct Store<unsigned char> {
    // round half up, clamp: the twin's clip(floor(v + 0.5), 0, 255)
    __device__ static unsigned char put(float v) {
        float r = floorf(v + 0.5f);
        r = fminf(fmaxf(r, 0.0f), 255.0f);
        return static_cast<unsigned char>(r);
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

template <int C, typename OutT, bool CHW>
__device__ __forceinline__ void warp_body(const unsigned long long* __restrict__ in_ptr,
                                          const long long* __restrict__ meta_i,
                                          const double* __restrict__ inv,
                                          const float* __restrict__ meta_f,
                                          OutT* __restrict__ out) {
    const int b = blockIdx.y;
    const long long* mi = meta_i + 8 * b;
    const int out_h = static_cast<int>(mi[3]);
    const int out_w = static_cast<int>(mi[4]);
    const unsigned int npix = static_cast<unsigned int>(out_h) * static_cast<unsigned int>(out_w);
    const unsigned int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= npix) return;
    const int i = static_cast<int>(p / static_cast<unsigned int>(out_w));
    const int j = static_cast<int>(p - static_cast<unsigned int>(i) * out_w);

    const int in_h = static_cast<int>(mi[0]);
    const int in_w = static_cast<int>(mi[1]);
    const long long pitch = mi[2];
    const int nx = static_cast<int>(mi[5]);
    const int ny = static_cast<int>(mi[6]);
    const long long out_off = mi[7];
    const unsigned char* __restrict__ src =
        reinterpret_cast<const unsigned char*>(static_cast<size_t>(in_ptr[b]));
    const double* m = inv + 6 * b;
    const double a00 = m[0], a01 = m[1], a02 = m[2];
    const double a10 = m[3], a11 = m[4], a12 = m[5];
    const float* fill = meta_f + 3 * C * b;
    const float* mean = fill + C;
    const float* stdv = fill + 2 * C;

    float acc[C];
#pragma unroll
    for (int c = 0; c < C; ++c) acc[c] = 0.0f;

    for (int tb = 0; tb < ny; ++tb) {
        const double oy = i + (tb + 0.5) / ny;
        for (int ta = 0; ta < nx; ++ta) {
            const double ox = j + (ta + 0.5) / nx;
            const double u = a00 * ox + a01 * oy + a02 - 0.5;
            const double v = a10 * ox + a11 * oy + a12 - 0.5;
            // A point outside the source domain [0, W) x [0, H) takes fill as a whole; inside,
            // the four taps are clamped to the image (edge pixels replicate).
            const double xs = u + 0.5, ys = v + 0.5;
            if (!(xs >= 0.0 && xs < static_cast<double>(in_w) && ys >= 0.0 &&
                  ys < static_cast<double>(in_h))) {
#pragma unroll
                for (int c = 0; c < C; ++c) acc[c] += fill[c];
                continue;
            }
            const double uf = floor(u);
            const double vf = floor(v);
            const float fu = static_cast<float>(u - uf);
            const float fv = static_cast<float>(v - vf);
            const int x0 = static_cast<int>(uf);
            const int y0 = static_cast<int>(vf);
            const int xa = max(x0, 0), xb = min(x0 + 1, in_w - 1);
            const int ya = max(y0, 0), yb = min(y0 + 1, in_h - 1);
            const unsigned char* ra = src + static_cast<long long>(ya) * pitch;
            const unsigned char* rb = src + static_cast<long long>(yb) * pitch;
            const unsigned char* p00 = ra + static_cast<long long>(xa) * C;
            const unsigned char* p01 = ra + static_cast<long long>(xb) * C;
            const unsigned char* p10 = rb + static_cast<long long>(xa) * C;
            const unsigned char* p11 = rb + static_cast<long long>(xb) * C;
            const float w00 = (1.0f - fu) * (1.0f - fv), w01 = fu * (1.0f - fv);
            const float w10 = (1.0f - fu) * fv, w11 = fu * fv;
#pragma unroll
            for (int c = 0; c < C; ++c)
                acc[c] += w00 * static_cast<float>(p00[c]) + w01 * static_cast<float>(p01[c]) +
                          w10 * static_cast<float>(p10[c]) + w11 * static_cast<float>(p11[c]);
        }
    }

    const float scale = 1.0f / static_cast<float>(nx * ny);
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const float value = (acc[c] * scale - mean[c]) / stdv[c];
        const long long idx = CHW ? out_off + static_cast<long long>(c) * npix + p
                                  : out_off + static_cast<long long>(p) * C + c;
        out[idx] = Store<OutT>::put(value);
    }
}

#define DETAUG_WARP_KERNEL(NAME, C, OUT_T, CHW)                                               \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                  \
        const unsigned long long* __restrict__ in_ptr, const long long* __restrict__ meta_i,  \
        const double* __restrict__ inv, const float* __restrict__ meta_f,                     \
        OUT_T* __restrict__ out) {                                                            \
        warp_body<C, OUT_T, CHW>(in_ptr, meta_i, inv, meta_f, out);                           \
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
