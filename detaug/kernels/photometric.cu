// Photometric kernels of detaug; the NumPy twins and the exact math are in photometric.py.
// Compiled with --fmad=false: every float operation is rounded on its own, as NumPy's float32
// arithmetic is, so the twin reproduces these kernels bit for bit.
//
// One launch per batch (plus one small reduction launch where a sample adjusts its contrast):
// blockIdx.y walks the samples, blockIdx.x (grid-stride) a sample's pixels. Per sample:
// in_ptrs / out_ptrs are device addresses of contiguous HWC data (3 channels in; 3, or 1 for
// grayscale, out), counts the number of pixels.

#define PD_BRIGHTNESS 1
#define PD_CONTRAST 2
#define PD_CONTRAST_FIRST 4
#define PD_SATURATION 8
#define PD_HUE 16
#define PD_PERMUTE 32
#define PD_GRAY 64
#define PD_FPARAMS 8   // per sample: brightness, contrast, 1 - contrast, saturation, 1 - saturation, hue
#define PD_IPARAMS 4   // per sample: flags, permutation index, output channels, unused

#ifdef DETAUG_EMULATE
#define PD_WARP_SUM(x) (x)
#define PD_WARP_LEADER true
#else
template <typename T>
__device__ __forceinline__ T pd_warp_sum(T x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
  return x;
}
#define PD_WARP_SUM(x) pd_warp_sum(x)
#define PD_WARP_LEADER ((threadIdx.x & 31) == 0)
#endif

// The six permutations of (0, 1, 2) in lexicographic order; out[c] = in[perm[c]].
__constant__ int PD_PERMS[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};

struct Px { float c[3]; };

// torchvision's clamp to the dtype's bound, then the cast back to the image dtype (truncation).
template <bool U8>
__device__ __forceinline__ float pd_settle(float x) {
  x = fminf(fmaxf(x, 0.0f), U8 ? 255.0f : 1.0f);
  return U8 ? floorf(x) : x;
}

// rgb_to_grayscale's weights, summed left to right in float32.
__device__ __forceinline__ float pd_gray(const Px& p) {
  return p.c[0] * 0.2989f + p.c[1] * 0.587f + p.c[2] * 0.114f;
}

// _blend(image, other, ratio): image * ratio + other * (1 - ratio), clamped, cast back.
template <bool U8>
__device__ __forceinline__ void pd_blend(Px& p, float other, float ratio, float one_minus) {
  for (int k = 0; k < 3; ++k) p.c[k] = pd_settle<U8>(p.c[k] * ratio + other * one_minus);
}

template <bool U8>
__device__ __forceinline__ void pd_saturation(Px& p, float s, float one_minus) {
  float g = pd_gray(p);
  if (U8) g = floorf(g);
  pd_blend<U8>(p, g, s, one_minus);
}

// adjust_hue: RGB -> HSV (torchvision's _rgb_to_hsv), h += factor modulo 1, HSV -> RGB.
template <bool U8>
__device__ __forceinline__ void pd_hue(Px& p, float factor) {
  float r = p.c[0], g = p.c[1], b = p.c[2];
  if (U8) { r = r * (1.0f / 255.0f); g = g * (1.0f / 255.0f); b = b * (1.0f / 255.0f); }
  const float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
  const bool eqc = maxc == minc;
  const float range = maxc - minc;
  const float s = range / (eqc ? 1.0f : maxc);
  const float div = eqc ? 1.0f : range;
  const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
  float h;
  if (maxc == r) h = bc - gc;
  else if (maxc == g) h = (rc + 2.0f) - bc;
  else h = (gc + 4.0f) - rc;
  h = fmodf(h * (1.0f / 6.0f) + 1.0f, 1.0f);
  h = h + factor;
  h = h - floorf(h);                       // torch.remainder(h, 1.0)
  const float v = maxc;
  const float h6 = h * 6.0f;
  const float fi = floorf(h6);
  const float f = h6 - fi;
  const int i = ((int)fi % 6 + 6) % 6;
  const float sxf = s * f, oms = 1.0f - s;
  const float q = fminf(fmaxf((1.0f - sxf) * v, 0.0f), 1.0f);
  const float t = fminf(fmaxf((sxf + oms) * v, 0.0f), 1.0f);
  const float pp = fminf(fmaxf(oms * v, 0.0f), 1.0f);
  float out[3];                            // _hsv_to_rgb's select table
  switch (i) {
    case 0: out[0] = v; out[1] = t; out[2] = pp; break;
    case 1: out[0] = q; out[1] = v; out[2] = pp; break;
    case 2: out[0] = pp; out[1] = v; out[2] = t; break;
    case 3: out[0] = pp; out[1] = q; out[2] = v; break;
    case 4: out[0] = t; out[1] = pp; out[2] = v; break;
    default: out[0] = v; out[1] = pp; out[2] = q; break;
  }
  for (int k = 0; k < 3; ++k) p.c[k] = U8 ? pd_settle<true>(out[k] * 255.999f) : out[k];
}

template <typename T>
__device__ __forceinline__ Px pd_load(const T* src, long long i) {
  Px p;
  for (int k = 0; k < 3; ++k) p.c[k] = (float)src[3 * i + k];
  return p;
}

// The pixel as the contrast step sees it: after brightness, and (contrast last) saturation and hue.
template <bool U8>
__device__ __forceinline__ void pd_before_contrast(Px& p, int flags, const float* fp) {
  if (flags & PD_BRIGHTNESS) for (int k = 0; k < 3; ++k) p.c[k] = pd_settle<U8>(p.c[k] * fp[0]);
  if (!(flags & PD_CONTRAST_FIRST)) {
    if (flags & PD_SATURATION) pd_saturation<U8>(p, fp[3], fp[4]);
    if (flags & PD_HUE) pd_hue<U8>(p, fp[5]);
  }
}

// sums[b] += the grayscale of every pixel at the contrast step: floored for uint8, in fixed point
// (round(g * 2^24), two's complement) for float images. Integer sums: exact, in any order, so
// the mean is the same on every run and equal to the twin's.
#define PD_FIXED 16777216.0
template <typename T, bool U8>
__device__ void pd_reduce(const unsigned long long* in_ptrs, const unsigned long long* counts,
                          int num_samples, const int* iparams, const float* fparams,
                          unsigned long long* sums) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const int flags = iparams[PD_IPARAMS * b];
    if (!(flags & PD_CONTRAST)) continue;
    const T* src = (const T*)in_ptrs[b];
    const long long n = (long long)counts[b];
    const float* fp = fparams + PD_FPARAMS * b;
    unsigned long long isum = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
      Px p = pd_load(src, i);
      pd_before_contrast<U8>(p, flags, fp);
      const float g = pd_gray(p);
      isum += U8 ? (unsigned long long)floorf(g) : (unsigned long long)llrint((double)g * PD_FIXED);
    }
    isum = PD_WARP_SUM(isum);
    if (PD_WARP_LEADER && isum) atomicAdd(sums + b, isum);
  }
}

template <typename T, bool U8>
__device__ void pd_apply(const unsigned long long* in_ptrs, const unsigned long long* out_ptrs,
                         const unsigned long long* counts, int num_samples, const int* iparams,
                         const float* fparams, const unsigned long long* sums) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const int* ip = iparams + PD_IPARAMS * b;
    const int flags = ip[0], out_c = ip[2];
    const int* perm = PD_PERMS[ip[1]];
    const T* src = (const T*)in_ptrs[b];
    T* dst = (T*)out_ptrs[b];
    const long long n = (long long)counts[b];
    const float* fp = fparams + PD_FPARAMS * b;
    float mean = 0.0f;
    if (flags & PD_CONTRAST) {
      const double total = U8 ? (double)sums[b] : (double)(long long)sums[b] * (1.0 / PD_FIXED);
      mean = (float)(total / (double)(n > 0 ? n : 1));
    }
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
      Px p = pd_load(src, i);
      if (flags & PD_BRIGHTNESS) for (int k = 0; k < 3; ++k) p.c[k] = pd_settle<U8>(p.c[k] * fp[0]);
      if ((flags & PD_CONTRAST) && (flags & PD_CONTRAST_FIRST)) pd_blend<U8>(p, mean, fp[1], fp[2]);
      if (flags & PD_SATURATION) pd_saturation<U8>(p, fp[3], fp[4]);
      if (flags & PD_HUE) pd_hue<U8>(p, fp[5]);
      if ((flags & PD_CONTRAST) && !(flags & PD_CONTRAST_FIRST)) pd_blend<U8>(p, mean, fp[1], fp[2]);
      if (flags & PD_PERMUTE) {              // selects, not an indexed read: no local memory
        const Px q = p;
        for (int k = 0; k < 3; ++k) p.c[k] = perm[k] == 0 ? q.c[0] : (perm[k] == 1 ? q.c[1] : q.c[2]);
      }
      if (flags & PD_GRAY) {
        float g = pd_gray(p);
        if (U8) g = floorf(g);             // rgb_to_grayscale's cast back to uint8
        for (int k = 0; k < 3; ++k) p.c[k] = g;
      }
      for (int k = 0; k < out_c; ++k) dst[out_c * i + k] = (T)p.c[k];
    }
  }
}

#define PD_ARGS_REDUCE \
    const unsigned long long* __restrict__ in_ptrs, const unsigned long long* __restrict__ counts, \
    int num_samples, const int* __restrict__ iparams, const float* __restrict__ fparams, \
    unsigned long long* __restrict__ sums
#define PD_ARGS_APPLY \
    const unsigned long long* __restrict__ in_ptrs, const unsigned long long* __restrict__ out_ptrs, \
    const unsigned long long* __restrict__ counts, int num_samples, const int* __restrict__ iparams, \
    const float* __restrict__ fparams, const unsigned long long* __restrict__ sums

extern "C" __global__ void photometric_reduce_u8(PD_ARGS_REDUCE) {
  pd_reduce<unsigned char, true>(in_ptrs, counts, num_samples, iparams, fparams, sums);
}
extern "C" __global__ void photometric_reduce_f32(PD_ARGS_REDUCE) {
  pd_reduce<float, false>(in_ptrs, counts, num_samples, iparams, fparams, sums);
}
extern "C" __global__ void photometric_u8(PD_ARGS_APPLY) {
  pd_apply<unsigned char, true>(in_ptrs, out_ptrs, counts, num_samples, iparams, fparams, sums);
}
extern "C" __global__ void photometric_f32(PD_ARGS_APPLY) {
  pd_apply<float, false>(in_ptrs, out_ptrs, counts, num_samples, iparams, fparams, sums);
}

// ---- DALI's color_twist: one affine map of RGB per sample ------------------------------------------
// mats: (B, 12) float, row-major [M | offset]: out = M @ rgb + offset; a uint8 output is rounded
// half up and clamped to [0, 255], a float output is stored as it is (DALI: no clamp).
__device__ __forceinline__ unsigned char ct_store(float x, unsigned char*) {
  x = fminf(fmaxf(x, 0.0f), 255.0f);
  return (unsigned char)floorf(x + 0.5f);
}
__device__ __forceinline__ float ct_store(float x, float*) { return x; }

template <typename In, typename Out>
__device__ void ct_apply(const unsigned long long* in_ptrs, const unsigned long long* out_ptrs,
                         const unsigned long long* counts, int num_samples, const float* mats) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const In* src = (const In*)in_ptrs[b];
    Out* dst = (Out*)out_ptrs[b];
    const long long n = (long long)counts[b];
    float m[12];
    for (int k = 0; k < 12; ++k) m[k] = mats[12 * b + k];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
      const float r = (float)src[3 * i], g = (float)src[3 * i + 1], bl = (float)src[3 * i + 2];
      for (int k = 0; k < 3; ++k)
        dst[3 * i + k] = ct_store(m[4 * k] * r + m[4 * k + 1] * g + m[4 * k + 2] * bl + m[4 * k + 3],
                                  (Out*)nullptr);
    }
  }
}

#define CT_ARGS \
    const unsigned long long* __restrict__ in_ptrs, const unsigned long long* __restrict__ out_ptrs, \
    const unsigned long long* __restrict__ counts, int num_samples, const float* __restrict__ mats
extern "C" __global__ void color_twist_u8_u8(CT_ARGS) {
  ct_apply<unsigned char, unsigned char>(in_ptrs, out_ptrs, counts, num_samples, mats);
}
extern "C" __global__ void color_twist_u8_f32(CT_ARGS) {
  ct_apply<unsigned char, float>(in_ptrs, out_ptrs, counts, num_samples, mats);
}
extern "C" __global__ void color_twist_f32_f32(CT_ARGS) {
  ct_apply<float, float>(in_ptrs, out_ptrs, counts, num_samples, mats);
}
extern "C" __global__ void color_twist_f32_u8(CT_ARGS) {
  ct_apply<float, unsigned char>(in_ptrs, out_ptrs, counts, num_samples, mats);
}
