// Box kernels of detaug; NumPy twins and the exact math are in boxes.py.
// Compiled by NVRTC through cupy.RawModule with --fmad=false, so each double operation rounds
// as in NumPy. No headers: NVRTC provides the math functions used here.
//
// Box layout: float [x0, y0, x1, y1], continuous pixel coordinates.

#define DETAUG_FULL_MASK 0xffffffffu

// ------------------------------------------------------------------------- box_transform
// Enclosing box of (x0, y0, x1, y1) mapped through m (3x3; projective: with the divide): of the 4 corners
// (mode 0, in the order of the twin: (x0,y0) (x1,y0) (x1,y1) (x0,y1)) or of the inscribed
// ellipse (mode 1).
__device__ __forceinline__ void map_box(const double* m, int mode, double& x0, double& y0,
                                        double& x1, double& y1) {
  const double a00 = m[0], a01 = m[1], a02 = m[2];
  const double a10 = m[3], a11 = m[4], a12 = m[5];
  if (mode == 0) {
    const double cx[4] = {x0, x1, x1, x0};
    const double cy[4] = {y0, y0, y1, y1};
    double tx0, ty0, tx1, ty1;
    // a projective m (a perspective: last row not [0, 0, 1]) maps with the divide
    const double a20 = m[6], a21 = m[7], a22 = m[8];
    const bool proj = a20 != 0.0 || a21 != 0.0 || a22 != 1.0;
    tx0 = tx1 = a00 * cx[0] + a01 * cy[0] + a02;
    ty0 = ty1 = a10 * cx[0] + a11 * cy[0] + a12;
    if (proj) {
      const double w = a20 * cx[0] + a21 * cy[0] + a22;
      tx0 = tx1 = tx0 / w;
      ty0 = ty1 = ty0 / w;
    }
    for (int k = 1; k < 4; ++k) {
      double px = a00 * cx[k] + a01 * cy[k] + a02;
      double py = a10 * cx[k] + a11 * cy[k] + a12;
      if (proj) {
        const double w = a20 * cx[k] + a21 * cy[k] + a22;
        px = px / w;
        py = py / w;
      }
      tx0 = fmin(tx0, px);
      tx1 = fmax(tx1, px);
      ty0 = fmin(ty0, py);
      ty1 = fmax(ty1, py);
    }
    x0 = tx0; y0 = ty0; x1 = tx1; y1 = ty1;
  } else {
    const double cx = (x0 + x1) * 0.5, cy = (y0 + y1) * 0.5;
    const double ha = (x1 - x0) * 0.5, hb = (y1 - y0) * 0.5;
    const double ncx = a00 * cx + a01 * cy + a02;
    const double ncy = a10 * cx + a11 * cy + a12;
    const double p = a00 * ha, q = a01 * hb, r = a10 * ha, u = a11 * hb;
    const double hx = sqrt(p * p + q * q);
    const double hy = sqrt(r * r + u * u);
    x0 = ncx - hx; y0 = ncy - hy; x1 = ncx + hx; y1 = ncy + hy;
  }
}

// One thread per box (grid-stride), walking the box through the K stages of its chain:
// matrices (K, B, 3, 3) row-major double, canvas (K, B, 4) clip rectangles [x_lo, y_lo, x_hi,
// y_hi], modes (K,). At every stage the box is mapped and clipped to that stage's rectangle (the
// unclipped box is carried beside it for the visibility); see box_transform_numpy.
extern "C" __global__ void box_transform(
    const float* __restrict__ boxes, const int* __restrict__ sample_index,
    const double* __restrict__ matrices, const double* __restrict__ canvas,
    const int* __restrict__ modes, int num_stages, const bool* __restrict__ valid,
    int has_valid, long long n, int num_samples, int clip, double min_size, double min_area,
    double min_visibility, float* __restrict__ out, bool* __restrict__ keep) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const int s = sample_index[i];
    if (s < 0 || s >= num_samples) {  // bad metadata: drop, leave the box as it was
      for (int k = 0; k < 4; ++k) out[4 * i + k] = boxes[4 * i + k];
      keep[i] = false;
      continue;
    }
    double c0 = boxes[4 * i + 0], c1 = boxes[4 * i + 1];
    double c2 = boxes[4 * i + 2], c3 = boxes[4 * i + 3];
    double f0 = c0, f1 = c1, f2 = c2, f3 = c3;  // never clipped
    double t0 = c0, t1 = c1, t2 = c2, t3 = c3;  // the last stage's map before clipping
    bool alive = true;
    for (int k = 0; k < num_stages; ++k) {
      const long long at = (long long)k * num_samples + s;
      const double* m = matrices + 9 * at;
      t0 = c0; t1 = c1; t2 = c2; t3 = c3;
      map_box(m, modes[k], t0, t1, t2, t3);
      map_box(m, modes[k], f0, f1, f2, f3);
      const double* r = canvas + 4 * at;
      c0 = fmin(fmax(t0, r[0]), r[2]);
      c1 = fmin(fmax(t1, r[1]), r[3]);
      c2 = fmin(fmax(t2, r[0]), r[2]);
      c3 = fmin(fmax(t3, r[1]), r[3]);
      alive = alive && (c2 - c0 > 0.0) && (c3 - c1 > 0.0);
    }
    const double w = c2 - c0, h = c3 - c1;
    const double area = w * h;
    const double area_t = fmax(f2 - f0, 0.0) * fmax(f3 - f1, 0.0);
    const double vis = area_t > 0.0 ? area / area_t : 0.0;
    bool ok = alive && (w >= min_size) && (h >= min_size) && (area >= min_area) &&
              (vis >= min_visibility);
    if (has_valid) ok = ok && valid[i];
    keep[i] = ok;
    out[4 * i + 0] = (float)(clip ? c0 : t0);
    out[4 * i + 1] = (float)(clip ? c1 : t1);
    out[4 * i + 2] = (float)(clip ? c2 : t2);
    out[4 * i + 3] = (float)(clip ? c3 : t3);
  }
}

// ------------------------------------------------------------------------- pad_boxes
// Exclusive prefix sum of v over the block; *total gets the block's sum (same in every
// thread). blockDim.x must be a multiple of 32 and at most 1024; every thread must call it.
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  int x = v;
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(DETAUG_FULL_MASK, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < nwarps ? warp_sums[lane] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(DETAUG_FULL_MASK, w, d);
      if (lane >= d) w += y;
    }
    if (lane < nwarps) warp_sums[lane] = w;  // inclusive sums of the warps
  }
  __syncthreads();
  const int before = warp > 0 ? warp_sums[warp - 1] : 0;
  *total = warp_sums[nwarps - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return before + x - v;
}

__device__ __forceinline__ void copy_item(unsigned long long src, unsigned long long dst,
                                          int size, long long i, long long j) {
  switch (size) {
    case 1: ((unsigned char*)dst)[j] = ((const unsigned char*)src)[i]; break;
    case 2: ((unsigned short*)dst)[j] = ((const unsigned short*)src)[i]; break;
    case 4: ((unsigned int*)dst)[j] = ((const unsigned int*)src)[i]; break;
    case 8: ((unsigned long long*)dst)[j] = ((const unsigned long long*)src)[i]; break;
  }
}

__device__ __forceinline__ void fill_item(unsigned long long dst, int size, long long j,
                                          unsigned long long bits) {
  switch (size) {
    case 1: ((unsigned char*)dst)[j] = (unsigned char)bits; break;
    case 2: ((unsigned short*)dst)[j] = (unsigned short)bits; break;
    case 4: ((unsigned int*)dst)[j] = (unsigned int)bits; break;
    case 8: ((unsigned long long*)dst)[j] = bits; break;
  }
}

// One block per sample. Fields are raw buffers: field_src/field_dst are device addresses,
// field_size their item size in bytes, field_fill the pad value's bits (low bytes).
extern "C" __global__ void pad_boxes(
    const float* __restrict__ boxes, const bool* __restrict__ keep, int has_keep,
    const long long* __restrict__ offsets, int max_boxes, float fill, int num_fields,
    const unsigned long long* __restrict__ field_src,
    const unsigned long long* __restrict__ field_dst,
    const unsigned long long* __restrict__ field_size,
    const unsigned long long* __restrict__ field_fill,
    float* __restrict__ padded, int* __restrict__ counts) {
  __shared__ int warp_sums[32];
  const long long b = blockIdx.x;
  const long long start = offsets[b], end = offsets[b + 1];
  long long running = 0;  // kept boxes of this sample seen so far (same in every thread)
  for (long long base = start; base < end && running < max_boxes; base += blockDim.x) {
    const long long i = base + threadIdx.x;
    const int flag = (i < end) ? (has_keep ? (keep[i] ? 1 : 0) : 1) : 0;
    int total;
    const long long rank = running + block_exclusive_scan(flag, warp_sums, &total);
    if (flag && rank < max_boxes) {
      const long long r = b * max_boxes + rank;
      for (int k = 0; k < 4; ++k) padded[4 * r + k] = boxes[4 * i + k];
      for (int f = 0; f < num_fields; ++f)
        copy_item(field_src[f], field_dst[f], (int)field_size[f], i, r);
    }
    running += total;
  }
  const int count = (int)(running < max_boxes ? running : max_boxes);
  for (int j = count + threadIdx.x; j < max_boxes; j += blockDim.x) {
    const long long r = b * max_boxes + j;
    for (int k = 0; k < 4; ++k) padded[4 * r + k] = fill;
    for (int f = 0; f < num_fields; ++f)
      fill_item(field_dst[f], (int)field_size[f], r, field_fill[f]);
  }
  if (threadIdx.x == 0) counts[b] = count;
}

// ------------------------------------------------------------------------- IoU
// Same operation order as boxes._iou_numpy.
__device__ __forceinline__ double iou(const float* a, const float* b) {
  const double ax0 = a[0], ay0 = a[1], ax1 = a[2], ay1 = a[3];
  const double bx0 = b[0], by0 = b[1], bx1 = b[2], by1 = b[3];
  const double iw = fmax(fmin(ax1, bx1) - fmax(ax0, bx0), 0.0);
  const double ih = fmax(fmin(ay1, by1) - fmax(ay0, by0), 0.0);
  const double inter = iw * ih;
  const double area_a = fmax(ax1 - ax0, 0.0) * fmax(ay1 - ay0, 0.0);
  const double area_b = fmax(bx1 - bx0, 0.0) * fmax(by1 - by0, 0.0);
  const double uni = area_a + area_b - inter;
  return uni > 0.0 ? inter / uni : 0.0;
}

// One thread per (i, j) of the (M, N) output.
extern "C" __global__ void iou_matrix(const float* __restrict__ a, const float* __restrict__ b,
                                      long long m, long long n, float* __restrict__ out) {
  const long long total = m * n;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / n, j = k - i * n;
    out[k] = (float)iou(a + 4 * i, b + 4 * j);
  }
}

// One thread per (b, t, j) of the (B, T, nmax) output; -1 where sample b has no box j.
extern "C" __global__ void windows_iou(const float* __restrict__ windows,
                                       const float* __restrict__ boxes,
                                       const long long* __restrict__ offsets, int t_count,
                                       int nmax, long long total, float* __restrict__ out) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
       k += (long long)gridDim.x * blockDim.x) {
    const long long bt = k / nmax, j = k - bt * nmax;
    const long long b = bt / t_count;
    const long long start = offsets[b], count = offsets[b + 1] - start;
    out[k] = j < count ? (float)iou(windows + 4 * bt, boxes + 4 * (start + j)) : -1.0f;
  }
}
