// Color kernels of detaug; NumPy twins and the exact math are in color.py.
// One launch per batch: blockIdx.y walks the samples, blockIdx.x (grid-stride) walks a
// sample's elements. Per sample: in_ptrs / out_ptrs are device addresses of contiguous uint8
// HWC data, counts the number of elements (bytes for brightness_contrast, RGB pixels for hsv).

__device__ __forceinline__ unsigned char round_clamp_u8(float x) {
  x = fminf(fmaxf(x, 0.0f), 255.0f);  // clamp first: the rounding then stays in 0..255
  return (unsigned char)floorf(x + 0.5f);
}

extern "C" __global__ void brightness_contrast(
    const unsigned long long* __restrict__ in_ptrs,
    const unsigned long long* __restrict__ out_ptrs,
    const unsigned long long* __restrict__ counts, int num_samples,
    const float* __restrict__ brightness, const float* __restrict__ contrast, float center) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const unsigned char* src = (const unsigned char*)in_ptrs[b];
    unsigned char* dst = (unsigned char*)out_ptrs[b];
    const long long n = (long long)counts[b];
    const float br = brightness[b], ct = contrast[b];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
      dst[i] = round_clamp_u8(br * (center + ct * ((float)src[i] - center)));
    }
  }
}

// mats: (B, 3, 3) float, row-major, applied to RGB column vectors.
extern "C" __global__ void hsv(
    const unsigned long long* __restrict__ in_ptrs,
    const unsigned long long* __restrict__ out_ptrs,
    const unsigned long long* __restrict__ counts, int num_samples,
    const float* __restrict__ mats) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const unsigned char* src = (const unsigned char*)in_ptrs[b];
    unsigned char* dst = (unsigned char*)out_ptrs[b];
    const long long n = (long long)counts[b];
    float m[9];
    for (int k = 0; k < 9; ++k) m[k] = mats[9 * b + k];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
      const float r = src[3 * i + 0], g = src[3 * i + 1], bl = src[3 * i + 2];
      dst[3 * i + 0] = round_clamp_u8(m[0] * r + m[1] * g + m[2] * bl);
      dst[3 * i + 1] = round_clamp_u8(m[3] * r + m[4] * g + m[5] * bl);
      dst[3 * i + 2] = round_clamp_u8(m[6] * r + m[7] * g + m[8] * bl);
    }
  }
}
