// DALI's separable resampling with its triangle filter, for axis-aligned chains (a resize with
// crops, flips and integral pastes around it). NumPy twin: resample.py:resample_numpy (same
// tables, same fill and epilogue). The filter's math (tap positions, weights, normalisation) is
// done on the host, in float64, once per output row and column (resample.py:axis_tables); the
// kernel only reads those tables, so the CPU and the GPU weigh the very same taps.
//
// One launch per batch: gridDim.y = B (sample), one thread per output pixel p (row-major) of
// its sample; threads past their sample's pixel count return at once.
//
// Per-sample metadata (b = sample):
//   in_ptr[b]          device address of an HWC uint8 image, rows meta_i[8 b + 0] bytes apart
//   meta_i[8 b + k]    k = 0 in_pitch (bytes per row), 1 out_h, 2 out_w, 3 element offset of the
//                      output in `out`, 4 first entry of the rows' table, 5 first entry of the
//                      columns' table, 6 ky (taps per row), 7 kx (taps per column)
//   idx[t], wt[t]      the tables: output row i of sample b owns entries row0 + i ky .. + ky - 1
//                      (source rows, already clamped, and their normalised weights), output
//                      column j entries col0 + j kx .. + kx - 1; a first index of -1 marks a row
//                      or column whose centre maps outside the chain's region (the pixel is fill)
//   meta_f[3 C b + k]  fill[C], mean[C], std[C] (mean 0 / std 1 when not normalising)
//
// Math: out(i, j) = sum_r wy[r] * sum_s wx[s] * src(rows[r], cols[s]) in float32 (fma), then
// (v - mean) / std, and a uint8 output clip(floor(v + 0.5), 0, 255) (resample.py's docstring).

template <typename T> struct Put;

template <> struct Put<unsigned char> {
    __device__ static unsigned char put(float v) {
        return static_cast<unsigned char>(fminf(fmaxf(floorf(v + 0.5f), 0.0f), 255.0f));
    }
};

template <> struct Put<float> {
    __device__ static float put(float v) { return v; }
};

// float16 as its bit pattern (round to nearest even), so no header is needed
template <> struct Put<unsigned short> {
    __device__ static unsigned short put(float v) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
    }
};

template <int C, typename OutT, bool CHW>
__device__ __forceinline__ void resample_body(const unsigned long long* __restrict__ in_ptr,
                                              const long long* __restrict__ meta_i,
                                              const int* __restrict__ idx,
                                              const float* __restrict__ wt,
                                              const float* __restrict__ meta_f,
                                              OutT* __restrict__ out) {
    const int b = blockIdx.y;
    const long long* mi = meta_i + 8 * b;
    const long long out_h = mi[1], out_w = mi[2], npix = out_h * out_w;
    const long long p = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= npix) return;
    const long long i = p / out_w, j = p - i * out_w;
    const int ky = static_cast<int>(mi[6]), kx = static_cast<int>(mi[7]);
    const long long rt = mi[4] + i * ky, ct = mi[5] + j * kx;
    const float* fill = meta_f + 3 * C * b;
    float val[C];
    if (idx[rt] < 0 || idx[ct] < 0) {
#pragma unroll
        for (int c = 0; c < C; ++c) val[c] = fill[c];
    } else {
        const unsigned char* src = reinterpret_cast<const unsigned char*>(in_ptr[b]);
        const unsigned long long pitch = static_cast<unsigned long long>(mi[0]);
#pragma unroll
        for (int c = 0; c < C; ++c) val[c] = 0.0f;
        for (int r = 0; r < ky; ++r) {
            const float wy = wt[rt + r];
            const unsigned char* row = src + static_cast<unsigned long long>(idx[rt + r]) * pitch;
            float acc[C];
#pragma unroll
            for (int c = 0; c < C; ++c) acc[c] = 0.0f;
            for (int s = 0; s < kx; ++s) {
                const float wx = wt[ct + s];
                const unsigned char* px = row + static_cast<unsigned long long>(idx[ct + s]) * C;
#pragma unroll
                for (int c = 0; c < C; ++c) acc[c] = fmaf(wx, static_cast<float>(__ldg(px + c)), acc[c]);
            }
#pragma unroll
            for (int c = 0; c < C; ++c) val[c] = fmaf(wy, acc[c], val[c]);
        }
    }
    OutT* o = out + mi[3];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const float v = (val[c] - fill[C + c]) / fill[2 * C + c];
        if (CHW)
            o[c * npix + p] = Put<OutT>::put(v);
        else
            o[p * C + c] = Put<OutT>::put(v);
    }
}

#define DETAUG_RESAMPLE_KERNEL(NAME, C, OUT_T, CHW)                                            \
    extern "C" __global__ void NAME(const unsigned long long* __restrict__ in_ptr,             \
                                    const long long* __restrict__ meta_i,                      \
                                    const int* __restrict__ idx, const float* __restrict__ wt, \
                                    const float* __restrict__ meta_f, OUT_T* __restrict__ out) { \
        resample_body<C, OUT_T, CHW>(in_ptr, meta_i, idx, wt, meta_f, out);                    \
    }

DETAUG_RESAMPLE_KERNEL(resample_u8_hwc_c1, 1, unsigned char, false)
DETAUG_RESAMPLE_KERNEL(resample_u8_hwc_c3, 3, unsigned char, false)
DETAUG_RESAMPLE_KERNEL(resample_u8_chw_c1, 1, unsigned char, true)
DETAUG_RESAMPLE_KERNEL(resample_u8_chw_c3, 3, unsigned char, true)
DETAUG_RESAMPLE_KERNEL(resample_f32_hwc_c1, 1, float, false)
DETAUG_RESAMPLE_KERNEL(resample_f32_hwc_c3, 3, float, false)
DETAUG_RESAMPLE_KERNEL(resample_f32_chw_c1, 1, float, true)
DETAUG_RESAMPLE_KERNEL(resample_f32_chw_c3, 3, float, true)
DETAUG_RESAMPLE_KERNEL(resample_f16_hwc_c1, 1, unsigned short, false)
DETAUG_RESAMPLE_KERNEL(resample_f16_hwc_c3, 3, unsigned short, false)
DETAUG_RESAMPLE_KERNEL(resample_f16_chw_c1, 1, unsigned short, true)
DETAUG_RESAMPLE_KERNEL(resample_f16_chw_c3, 3, unsigned short, true)
