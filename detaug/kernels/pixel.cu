// Pixel kernels of detaug (blur, noise, erase, jitter); NumPy twins and the exact math are in
// blur.py and noise.py. One launch per batch. Images are contiguous uint8 HWC, one pointer per
// sample. Compiled with --fmad=false: every product and sum is rounded on its own, in the
// order the twins use, so that the twins give the same bytes.
//
// Per-pixel random values come from a counter-based hash (detaug/core/rng.py counter_bits):
// word(key, n) = SplitMix64(key + (n + 1) * golden), with one key per sample drawn on the host
// from the op's keyed stream, and n the element's (or pixel's) index in its sample.

#define DETAUG_GOLDEN 0x9E3779B97F4A7C15ULL

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned long long counter_bits(unsigned long long key,
                                                           unsigned long long n) {
  return mix64(key + (n + 1ULL) * DETAUG_GOLDEN);
}

__device__ __forceinline__ double to_unit(unsigned long long bits) {
  return (double)(bits >> 11) * (1.0 / 9007199254740992.0);  // 2**-53
}

__device__ __forceinline__ unsigned char round_clamp_f(float x) {
  x = fminf(fmaxf(x, 0.0f), 255.0f);
  return (unsigned char)floorf(x + 0.5f);
}

__device__ __forceinline__ unsigned char round_clamp_d(double x) {
  x = fmin(fmax(x, 0.0), 255.0);
  return (unsigned char)floor(x + 0.5);
}

// Reflection without repeating the edge (torch's 'reflect', OpenCV's BORDER_REFLECT_101),
// folded as often as needed: the period is 2 (n - 1).
__device__ __forceinline__ long long reflect101(long long i, long long n) {
  if (n == 1) return 0;
  const long long period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// Box-Muller on the words 2n and 2n + 1 (SampleRNG.normal's rule).
__device__ __forceinline__ double normal_at(unsigned long long key, unsigned long long n) {
  const double u1 = fmax(to_unit(counter_bits(key, 2 * n)), 1e-300);
  const double u2 = to_unit(counter_bits(key, 2 * n + 1));
  return sqrt(-2.0 * log(u1)) * cos((2.0 * 3.141592653589793) * u2);
}

// ------------------------------------------------------------------------------------- blur
// dims: (B, 5) int h, w, c, rx, ry. woff: (B,) offset into weights of the sample's wx (2 rx + 1
// values), followed by its wy (2 ry + 1). A block makes a tile of BLUR_TW x BLUR_TH output
// pixels of one sample (blockIdx.z), one channel at a time: the horizontal pass of the rows the
// tile needs goes to shared memory ((BLUR_TH + 2 ry) x BLUR_TW floats), then the vertical pass.
#define BLUR_TW 32
#define BLUR_TH 32

extern "C" __global__ void gaussian_blur(
    const unsigned long long* __restrict__ in_ptrs,
    const unsigned long long* __restrict__ out_ptrs,
    const int* __restrict__ dims, const long long* __restrict__ woff,
    const float* __restrict__ weights) {
  extern __shared__ float hbuf[];
  const int b = blockIdx.z;
  const int h = dims[5 * b], w = dims[5 * b + 1], c = dims[5 * b + 2];
  const int rx = dims[5 * b + 3], ry = dims[5 * b + 4];
  const int x0 = blockIdx.x * BLUR_TW, y0 = blockIdx.y * BLUR_TH;
  if (x0 >= w || y0 >= h) return;  // the whole block: no barrier is skipped by part of it
  const unsigned char* src = (const unsigned char*)in_ptrs[b];
  unsigned char* dst = (unsigned char*)out_ptrs[b];
  const float* wx = weights + woff[b];
  const float* wy = wx + 2 * rx + 1;
  const int rows = BLUR_TH + 2 * ry;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nt = blockDim.x * blockDim.y;
  for (int ch = 0; ch < c; ++ch) {
    for (int k = tid; k < rows * BLUR_TW; k += nt) {
      const int rr = k / BLUR_TW, cc = k % BLUR_TW;
      const int x = x0 + cc;
      float acc = 0.0f;
      if (x < w) {
        const long long y = reflect101((long long)y0 - ry + rr, h);
        const unsigned char* row = src + y * w * c + ch;
        for (int j = 0; j <= 2 * rx; ++j)
          acc = acc + wx[j] * (float)row[reflect101((long long)x + j - rx, w) * c];
      }
      hbuf[k] = acc;
    }
    __syncthreads();
    for (int k = tid; k < BLUR_TH * BLUR_TW; k += nt) {
      const int rr = k / BLUR_TW, cc = k % BLUR_TW;
      const int x = x0 + cc, y = y0 + rr;
      if (x < w && y < h) {
        float acc = 0.0f;
        for (int i = 0; i <= 2 * ry; ++i) acc = acc + wy[i] * hbuf[(rr + i) * BLUR_TW + cc];
        dst[((long long)y * w + x) * c + ch] = round_clamp_f(acc);
      }
    }
    __syncthreads();
  }
}

// ------------------------------------------------------------------------------------ noise
// One launch walks every element (blockIdx.y: samples, grid-stride over blockIdx.x).
// meta: (B, 2) long long: elements, channels. keys (B,). params (B, 4) double; mode:
//   0 gaussian:        out = x + p0 + p1 * z           (p0 mean, p1 stddev)
//   1 salt and pepper: u < p0 (amount): p2 (salt) where u' < p1 (salt_vs_pepper), else p3
//   2 shot:            out = poisson(x / p0) * p0      (p0 factor; p0 <= 0: x unchanged)
// per_channel: draws per element (1) or per pixel (0, every channel the same draw).
#define SHOT_INVERSION_MAX 32.0

__device__ __forceinline__ double poisson_at(unsigned long long key, unsigned long long n, double lam) {
  if (lam <= 0.0) return 0.0;
  if (lam >= SHOT_INVERSION_MAX) {  // normal approximation, rounded (noise.py: shot)
    const double k = floor(lam + sqrt(lam) * normal_at(key, n) + 0.5);
    return fmax(k, 0.0);
  }
  const double u = to_unit(counter_bits(key, 2 * n));
  double p = exp(-lam), f = p, k = 0.0;
  while (u > f && k < 1000.0) {  // inversion: the first k with F(k) >= u
    k = k + 1.0;
    p = p * (lam / k);
    f = f + p;
  }
  return k;
}

extern "C" __global__ void pixel_noise(
    const unsigned long long* __restrict__ in_ptrs,
    const unsigned long long* __restrict__ out_ptrs,
    const long long* __restrict__ meta, const unsigned long long* __restrict__ keys,
    const double* __restrict__ params, int num_samples, int mode, int per_channel) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const unsigned char* src = (const unsigned char*)in_ptrs[b];
    unsigned char* dst = (unsigned char*)out_ptrs[b];
    const long long count = meta[2 * b], c = meta[2 * b + 1];
    const unsigned long long key = keys[b];
    const double p0 = params[4 * b], p1 = params[4 * b + 1];
    const double p2 = params[4 * b + 2], p3 = params[4 * b + 3];
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
         e += (long long)gridDim.x * blockDim.x) {
      const unsigned long long n = per_channel ? (unsigned long long)e : (unsigned long long)(e / c);
      const double x = (double)src[e];
      if (mode == 0) {
        dst[e] = round_clamp_d(x + p0 + p1 * normal_at(key, n));
      } else if (mode == 1) {
        const double u = to_unit(counter_bits(key, 2 * n));
        const double v = to_unit(counter_bits(key, 2 * n + 1));
        dst[e] = u < p0 ? round_clamp_d(v < p1 ? p2 : p3) : src[e];
      } else {
        dst[e] = p0 > 0.0 ? round_clamp_d(poisson_at(key, n, x / p0) * p0) : src[e];
      }
    }
  }
}

// ------------------------------------------------------------------------------------ erase
// meta: (B, 3) long long: elements, width, channels. rect_off (B + 1) int: the sample's rects
// are rects[rect_off[b] .. rect_off[b + 1]), each (y0, x0, y1, x1) int, half-open. fills
// (B, fill_stride) uint8, one per channel; random (B,) int: 1 fills with the top byte of
// word(key, element index) instead.
extern "C" __global__ void erase(
    const unsigned long long* __restrict__ in_ptrs,
    const unsigned long long* __restrict__ out_ptrs,
    const long long* __restrict__ meta, const int* __restrict__ rect_off,
    const int* __restrict__ rects, const unsigned char* __restrict__ fills, int fill_stride,
    const int* __restrict__ random, const unsigned long long* __restrict__ keys,
    int num_samples) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const unsigned char* src = (const unsigned char*)in_ptrs[b];
    unsigned char* dst = (unsigned char*)out_ptrs[b];
    const long long count = meta[3 * b], w = meta[3 * b + 1], c = meta[3 * b + 2];
    const int r0 = rect_off[b], r1 = rect_off[b + 1];
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
         e += (long long)gridDim.x * blockDim.x) {
      const long long p = e / c, ch = e % c, y = p / w, x = p % w;
      bool inside = false;
      for (int r = r0; r < r1 && !inside; ++r) {
        const int* q = rects + 4 * r;
        inside = y >= q[0] && x >= q[1] && y < q[2] && x < q[3];
      }
      if (!inside) dst[e] = src[e];
      else if (random[b]) dst[e] = (unsigned char)(counter_bits(keys[b], (unsigned long long)e) >> 56);
      else dst[e] = fills[(long long)b * fill_stride + ch];
    }
  }
}

// ----------------------------------------------------------------------------------- jitter
// DALI's jitter: output pixel (y, x) takes input pixel (y + dy, x + dx), dx = word(key, 2p) mod
// n - n / 2 and dy = word(key, 2p + 1) mod n - n / 2 (p the pixel's index, n = nDegree), or the
// fill where that lies outside the image; a sample whose mask is 0 is copied.
// meta: (B, 4) long long: h, w, c, mask. fills (B, fill_stride) uint8.
extern "C" __global__ void jitter(
    const unsigned long long* __restrict__ in_ptrs,
    const unsigned long long* __restrict__ out_ptrs,
    const long long* __restrict__ meta, const unsigned long long* __restrict__ keys,
    const unsigned char* __restrict__ fills, int fill_stride, int n_degree, int num_samples) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const unsigned char* src = (const unsigned char*)in_ptrs[b];
    unsigned char* dst = (unsigned char*)out_ptrs[b];
    const long long h = meta[4 * b], w = meta[4 * b + 1], c = meta[4 * b + 2];
    const bool on = meta[4 * b + 3] != 0;
    const long long count = h * w * c;
    const unsigned long long key = keys[b];
    const unsigned long long nd = (unsigned long long)n_degree;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
         e += (long long)gridDim.x * blockDim.x) {
      if (!on) { dst[e] = src[e]; continue; }
      const long long p = e / c, ch = e % c, y = p / w, x = p % w;
      const unsigned long long up = (unsigned long long)p;
      const long long sx = x + (long long)(counter_bits(key, 2 * up) % nd) - n_degree / 2;
      const long long sy = y + (long long)(counter_bits(key, 2 * up + 1) % nd) - n_degree / 2;
      dst[e] = (sx >= 0 && sx < w && sy >= 0 && sy < h) ? src[(sy * w + sx) * c + ch]
                                                       : fills[(long long)b * fill_stride + ch];
    }
  }
}
