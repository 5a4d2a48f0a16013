// Multi-sample composition of detaug (mosaic tiles, mixup blends); the NumPy twin and the exact
// math are in compose.py. One launch per batch: blockIdx.y walks the output samples,
// blockIdx.x (grid-stride) walks a sample's output bytes (HWC uint8).
//
// tile_ptrs (T,): device addresses of the uint8 HWC tiles; tile_meta (T, 6) int64:
// x0, y0 (the tile's place on its output canvas), h, w, row pitch in bytes, weight (of 65536).
// out_meta (B, 5) int64: H, W, offset of the sample in `out` (bytes), first tile, end tile.
// fill (B, C) int32. mode 0 ("first"): the first tile of the sample that covers the pixel, else
// fill. mode 1 ("weighted"): (sum over the sample's tiles of weight * (tile value where the tile
// covers the pixel, else fill) + 32768) >> 16: exact integer math, the twin's to the bit.

extern "C" __global__ void compose_u8(
    const unsigned long long* __restrict__ tile_ptrs, const long long* __restrict__ tile_meta,
    const long long* __restrict__ out_meta, const int* __restrict__ fill, int num_samples,
    int channels, int mode, unsigned char* __restrict__ out) {
  for (int b = blockIdx.y; b < num_samples; b += gridDim.y) {
    const long long W = out_meta[5 * b + 1], off = out_meta[5 * b + 2];
    const long long n = out_meta[5 * b] * W * channels;
    const int lo = (int)out_meta[5 * b + 3], hi = (int)out_meta[5 * b + 4];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
      const int c = (int)(i % channels);
      const long long p = i / channels;
      const long long y = p / W, x = p - y * W;
      const int f = fill[b * channels + c];
      long long acc = 0;
      int v = f;
      for (int t = lo; t < hi; ++t) {
        const long long* m = tile_meta + 6 * t;
        const long long tx = x - m[0], ty = y - m[1];
        const bool inside = tx >= 0 && ty >= 0 && ty < m[2] && tx < m[3];
        int s = f;
        if (inside) s = ((const unsigned char*)tile_ptrs[t])[ty * m[4] + tx * channels + c];
        if (mode == 1) {
          acc += m[5] * (long long)s;
        } else if (inside) {
          v = s;
          break;
        }
      }
      out[off + i] = (unsigned char)(mode == 1 ? ((acc + 32768) >> 16) : v);
    }
  }
}
