// Polygons to masks as COCO makes them (pycocotools' rleFrPoly, then merge), one launch for
// every box of a batch. The rule, and the NumPy twin this kernel must equal bit for bit, are in
// core/polygon_fill.py. Compiled by NVRTC through cupy.RawModule with --fmad=false, so each
// double operation rounds as in pycocotools' C and in NumPy.
//
// One thread per (box, pixel column): it walks every edge of the box's polygons (the dense
// field (N, P, 2) float64, a NaN row ending each polygon), finds where the edge's fine-grid walk
// passes its column (at most once an edge) and toggles that row. The output (N, out_h, out_w)
// uint8 comes zeroed; down the column bit 0 holds the union so far and bits 1..7 the toggles of
// up to 7 polygons at once, resolved by one sweep over the rows they span (even-odd per
// polygon, then OR into bit 0). Neighbouring threads own neighbouring columns, so every row
// access of a warp is one contiguous run of bytes.

#define FINE 5

// (int)((a + s * t) + 0.5) as pycocotools computes it (C's cast truncates toward zero)
__device__ __forceinline__ long long walk_at(double a, double s, long long t) {
  return (long long)(__dadd_rn(__dadd_rn(a, __dmul_rn(s, (double)t)), 0.5));
}

__device__ __forceinline__ long long fine(double v) {
  return (long long)(__dadd_rn(__dmul_rn((double)FINE, v), 0.5));
}

// Whether the walk of the edge (x0, y0) -> (x1, y1) (fine grid) passes pixel column c, i.e.
// steps between fine columns 5c + 2 and 5c + 3; if so *v is the smaller fine row of the two
// points around the step.
__device__ bool edge_pass(long long x0, long long y0, long long x1, long long y1, long long c,
                          long long* v) {
  const long long dx = x1 > x0 ? x1 - x0 : x0 - x1, dy = y1 > y0 ? y1 - y0 : y0 - y1;
  const bool flip = (dx >= dy && x0 > x1) || (dx < dy && y0 > y1);
  const long long xs = flip ? x1 : x0, xe = flip ? x0 : x1;
  const long long ys = flip ? y1 : y0, ye = flip ? y0 : y1;
  const long long target = FINE * c + 2;
  if (dx >= dy) {  // walked along x: step t at fine column xs + t
    if (dx == 0 || target < xs || target + 1 > xe) return false;
    const double s = __ddiv_rn((double)(ye - ys), (double)dx);
    const long long t = target - xs;
    const long long va = walk_at((double)ys, s, t), vb = walk_at((double)ys, s, t + 1);
    *v = va < vb ? va : vb;
    return true;
  }
  // walked along y: step t at fine row ys + t, its column moves one at a time, monotonically,
  // within [min(xs, xe), max(xs, xe) + 1] (the cast truncates toward zero): most threads' columns
  // lie outside, and leave before the division
  if (target + 1 < (xs < xe ? xs : xe) || target > (xs < xe ? xe : xs) + 1) return false;
  const double s = __ddiv_rn((double)(xe - xs), (double)dy);
  const long long u0 = walk_at((double)xs, s, 0), u1 = walk_at((double)xs, s, dy);
  const long long lo_u = u0 < u1 ? u0 : u1, hi_u = u0 < u1 ? u1 : u0;
  if (target < lo_u || target + 1 > hi_u) return false;
  const bool rising = u1 > u0;
  long long lo = 1, hi = dy;  // the first step past the pass
  while (lo < hi) {
    const long long mid = (lo + hi) / 2;
    const long long u = walk_at((double)xs, s, mid);
    if (rising ? u > target : u <= target) hi = mid; else lo = mid + 1;
  }
  *v = ys + lo - 1;
  return true;
}

// Resolve the pending polygons' toggles (bits 1..7) of rows lo.. of one column into bit 0: the
// parity of each polygon's toggles so far is its fill; past the last toggled row (hi) a parity
// of 0 ends the sweep (a polygon that runs off the canvas's bottom keeps its parity to row h).
__device__ void sweep(unsigned char* col, long long stride, int lo, int hi, int h) {
  unsigned par = 0;
  for (int y = lo; y < h; ++y) {
    unsigned char b = col[(long long)y * stride];
    par ^= (unsigned)(b >> 1);
    col[(long long)y * stride] = (unsigned char)((b & 1) | (par != 0));
    if (y >= hi && par == 0) break;
  }
}

extern "C" __global__ void polygon_masks(
    const double* __restrict__ rows, long long n, int p, const long long* __restrict__ canvas,
    int out_h, int out_w, double overflow, unsigned char* __restrict__ out) {
  const long long total = n * (long long)out_w;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long i = t / out_w;
    const int c = (int)(t - i * out_w);
    const int h = (int)canvas[2 * i], w = (int)canvas[2 * i + 1];
    const double* r = rows + i * (long long)p * 2;
    if (c >= w || p == 0 || r[0] == overflow) continue;  // overflow: refused at the output
    unsigned char* col = out + i * (long long)out_h * out_w + c;
    int bit = 0, lo = h, hi = -1, start = 0;
    for (int j = 0; j <= p; ++j) {
      if (j < p && r[2 * j] == r[2 * j]) continue;  // a real point (NaN != NaN)
      const int k = j - start;
      if (k > 0) {
        ++bit;
        const unsigned char m = (unsigned char)(1u << bit);
        long long xa = fine(r[2 * (j - 1)]), ya = fine(r[2 * (j - 1) + 1]);  // closing edge first
        for (int e = start; e < j; ++e) {
          const long long xb = fine(r[2 * e]), yb = fine(r[2 * e + 1]);
          long long v;
          if (edge_pass(xa, ya, xb, yb, c, &v)) {
            long long row = v >= 2 ? (v - 2 + FINE - 1) / FINE : -((2 - v) / FINE);
            row = row < 0 ? 0 : (row > h ? h : row);
            if (row < h) {
              col[row * (long long)out_w] ^= m;
              lo = (int)row < lo ? (int)row : lo;
              hi = (int)row > hi ? (int)row : hi;
            }
          }
          xa = xb;
          ya = yb;
        }
        if (bit == 7) {
          if (hi >= 0) sweep(col, out_w, lo, hi, h);
          bit = 0, lo = h, hi = -1;
        }
      }
      start = j + 1;
    }
    if (bit && hi >= 0) sweep(col, out_w, lo, hi, h);
  }
}

// DALI's pixelwise masks from the boxes' masks: one thread per (sample, pixel) of the
// (B, out_h, out_w) label map; each pixel takes the largest value[i] of the kept boxes i of its
// sample (rows offsets[b]..offsets[b + 1] of masks) whose mask covers it, 0 where none does.
extern "C" __global__ void masks_to_labels(
    const unsigned char* __restrict__ masks, const long long* __restrict__ offsets,
    const int* __restrict__ value, long long b, int out_h, int out_w, int* __restrict__ out) {
  const long long plane = (long long)out_h * out_w, total = b * plane;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long s = t / plane, px = t - s * plane;
    int best = 0;
    for (long long i = offsets[s]; i < offsets[s + 1]; ++i)
      if (masks[i * plane + px] && value[i] > best) best = value[i];
    out[t] = best;
  }
}
