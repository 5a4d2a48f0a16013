// DALI's displacement filters water and sphere on HWC images (uint8 or float32), one launch per
// batch: thread e of sample b (blockIdx.y) makes output element e = (y * W + x) * C + ch. The
// NumPy twins and the rules are in displace.py (water_numpy, sphere_numpy, sample); the float32
// operations are the twin's, in its order, compiled without fused multiply-adds. sqrt and the
// division are exact in both, so sphere's points are the twin's to the bit; water's sinf / cosf
// may differ from NumPy's float32 sin / cos in the last bit.
//
// in_ptrs / out_ptrs: (B,) device pointers; meta (B, 4) long long: h, w, c, mask (0: copied);
// params (B, 6) float: ampl_x, ampl_y, freq_x, freq_y, phase_x, phase_y (water only); fills
// (B, fill_stride) float: a tap outside the image takes fills[b, ch] (uint8 images: an integer).

template <typename T>
__device__ __forceinline__ float tap(const T* src, long long h, long long w, long long c,
                                     long long xi, long long yi, long long ch, float fill) {
  return (xi >= 0 && xi < w && yi >= 0 && yi < h) ? (float)src[(yi * w + xi) * c + ch] : fill;
}

template <typename T>
__device__ __forceinline__ void sample_at(const T* src, T* dst, long long e, long long h,
                                          long long w, long long c, long long ch, float sx,
                                          float sy, int linear, float fill, int is_uint8) {
  if (!linear) {
    const float v = tap(src, h, w, c, (long long)floorf(sx), (long long)floorf(sy), ch, fill);
    dst[e] = (T)v;  // a pixel or the fill: already of the image's type
    return;
  }
  const float x = sx - 0.5f, y = sy - 0.5f;
  const float x0f = floorf(x), y0f = floorf(y);
  const long long x0 = (long long)x0f, y0 = (long long)y0f;
  const float qx = x - x0f, qy = y - y0f;
  const float px = 1.0f - qx;
  const float s00 = tap(src, h, w, c, x0, y0, ch, fill), s01 = tap(src, h, w, c, x0 + 1, y0, ch, fill);
  const float s10 = tap(src, h, w, c, x0, y0 + 1, ch, fill);
  const float s11 = tap(src, h, w, c, x0 + 1, y0 + 1, ch, fill);
  const float s0 = s00 * px + s01 * qx;
  const float s1 = s10 * px + s11 * qx;
  const float v = s0 + (s1 - s0) * qy;
  if (is_uint8) {  // DALI's ConvertSat on the host: round half up, then clamp
    dst[e] = (T)fminf(fmaxf(floorf(v + 0.5f), 0.0f), 255.0f);
  } else {
    dst[e] = (T)v;
  }
}

template <typename T>
__device__ __forceinline__ void displace_one(const T* src, T* dst, const long long* m,
                                             const float* p, const float* fills, int mode,
                                             int linear, int is_uint8, long long first,
                                             long long step) {
  const long long h = m[0], w = m[1], c = m[2];
  const bool on = m[3] != 0;
  const long long count = h * w * c;
  for (long long e = first; e < count; e += step) {
    if (!on) { dst[e] = src[e]; continue; }
    const long long pix = e / c, ch = e % c, yi = pix / w, xi = pix % w;
    const float x = (float)xi, y = (float)yi;
    float sx, sy;
    if (mode == 0) {  // water
      sx = x + p[0] * sinf(p[2] * y + p[4]);
      sy = y + p[1] * cosf(p[3] * x + p[5]);
    } else {  // sphere
      const float mid_x = (float)((double)w * 0.5), mid_y = (float)((double)h * 0.5);
      const float d = (float)(long long)fmaxf(mid_x, mid_y);  // DALI's const int d: truncated
      const float tx = x + 0.5f - mid_x, ty = y + 0.5f - mid_y;
      const float rad = sqrtf(tx * tx + ty * ty) / d;
      sx = mid_x + rad * tx;
      sy = mid_y + rad * ty;
    }
    sample_at(src, dst, e, h, w, c, ch, sx, sy, linear, fills[ch], is_uint8);
  }
}

extern "C" __global__ void displace(
    const unsigned long long* __restrict__ in_ptrs,
    const unsigned long long* __restrict__ out_ptrs,
    const long long* __restrict__ meta, const float* __restrict__ params,
    const float* __restrict__ fills, int fill_stride, int mode, int linear, int is_uint8,
    int num_samples) {
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const long long* m = meta + 4 * (long long)b;
    const float* p = params + 6 * (long long)b;
    const float* f = fills + (long long)b * fill_stride;
    if (is_uint8) {
      displace_one((const unsigned char*)in_ptrs[b], (unsigned char*)out_ptrs[b], m, p, f, mode,
                   linear, 1, first, step);
    } else {
      displace_one((const float*)in_ptrs[b], (float*)out_ptrs[b], m, p, f, mode, linear, 0,
                   first, step);
    }
  }
}
