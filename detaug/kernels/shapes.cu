// Instance-shape kernels of detaug: keypoints, oriented boxes and polygons through a chain's
// matrices, padding of per-box shaped fields. The reference is core/instances.py; the twins,
// layouts and exact rules are in shapes.py. Compiled by NVRTC through cupy.RawModule with
// --fmad=false, so each double operation rounds as in NumPy. No headers: NaN and the overflow
// marker come in as arguments, NaN is tested as x != x.
//
// A chain: matrices (S, B, 3, 3) row-major double, each op's own matrix; sizes (S, B, 2) int64
// (H, W) of each op's output canvas.

// A point through a 3x3 matrix in the order of instances._map: the linear part plus the
// translation, then the perspective divide where w != 1 (dividing by 1 changes nothing).
__device__ __forceinline__ void map_point(const double* m, double& x, double& y) {
  double px = m[0] * x + m[1] * y;
  px = px + m[2];
  double py = m[3] * x + m[4] * y;
  py = py + m[5];
  double w = m[6] * x + m[7] * y;
  w = w + m[8];
  if (w != 1.0) {
    px = px / w;
    py = py / w;
  }
  x = px;
  y = py;
}

// ------------------------------------------------------------------------- keypoints
// One thread per output slot (instance i, keypoint j). A mirrored sample's slot j takes the
// point flip[i, j] (transform_keypoints swaps after mapping; mapping is per point, so gathering
// first is the same); an index outside [0, K) gives the unlabelled point (0, 0, 0). A labelled
// point (v > 0) goes through every stage and becomes (0, 0, 0) when it lies on no pixel of that
// stage's canvas (0 <= x < W, 0 <= y < H).
extern "C" __global__ void keypoints_transform(
    const float* __restrict__ kp, const int* __restrict__ sample, long long n, int k,
    const double* __restrict__ matrices, const long long* __restrict__ sizes, int num_stages,
    int num_samples, const long long* __restrict__ flip, int has_flip,
    const int* __restrict__ mirror, float* __restrict__ out) {
  const long long total = n * (long long)k;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long inst = t / k;
    const int s = sample[inst];
    long long src = t;
    bool live = s >= 0 && s < num_samples;
    if (live && has_flip && mirror[s]) {
      const long long j = flip[t];
      live = j >= 0 && j < k;
      src = inst * k + j;
    }
    double x = 0.0, y = 0.0, v = 0.0;
    if (live) {
      x = kp[3 * src + 0];
      y = kp[3 * src + 1];
      v = kp[3 * src + 2];
      live = v > 0.0;
    }
    for (int st = 0; st < num_stages && live; ++st) {
      const long long at = (long long)st * num_samples + s;
      map_point(matrices + 9 * at, x, y);
      const double h = (double)sizes[2 * at], w = (double)sizes[2 * at + 1];
      live = x >= 0.0 && x < w && y >= 0.0 && y < h;
    }
    out[3 * t + 0] = live ? (float)x : 0.0f;
    out[3 * t + 1] = live ? (float)y : 0.0f;
    out[3 * t + 2] = live ? (float)v : 0.0f;
  }
}

// ------------------------------------------------------------------------- oriented boxes
__device__ __forceinline__ double sign_of(double a) {
  return a > 0.0 ? 1.0 : (a < 0.0 ? -1.0 : (a == 0.0 ? 0.0 : a));
}

// (instances._turn) the sign of the quadrilateral's signed area
__device__ __forceinline__ double turn_of(const double* qx, const double* qy) {
  double acc = 0.0;
  for (int i = 0; i < 4; ++i) {
    const int j = (i + 1) & 3;
    acc = acc + (qx[i] * qy[j] - qx[j] * qy[i]);
  }
  return sign_of(acc);
}

__device__ __forceinline__ double norm2(double x, double y) { return sqrt(x * x + y * y); }

// One thread per box: the 4 corners through the composed matrix; kept where they form a
// rectangle (within rtol), else the smallest-area rectangle enclosing them (instances.
// _min_area_rect: one side along one of the quadrilateral's edges; corners from the one nearest
// the first mapped corner, turning as the mapped corners do).
extern "C" __global__ void obb_transform(const float* __restrict__ corners,
                                         const int* __restrict__ sample, long long n,
                                         const double* __restrict__ composed, int num_samples,
                                         double rtol, double nan_value, float* __restrict__ out) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const int s = sample[i];
    double qx[4], qy[4];
    for (int c = 0; c < 4; ++c) {
      qx[c] = corners[8 * i + 2 * c];
      qy[c] = corners[8 * i + 2 * c + 1];
      if (s >= 0 && s < num_samples) {
        map_point(composed + 9 * (long long)s, qx[c], qy[c]);
      } else {
        qx[c] = nan_value;  // bad metadata
        qy[c] = nan_value;
      }
    }
    const double e0x = qx[1] - qx[0], e0y = qy[1] - qy[0];
    const double e1x = qx[2] - qx[1], e1y = qy[2] - qy[1];
    const double scale = norm2(e0x, e0y) * norm2(e1x, e1y);
    const double dx = ((qx[0] + qx[2]) - qx[1]) - qx[3];
    const double dy = ((qy[0] + qy[2]) - qy[1]) - qy[3];
    const double mx = (((qx[0] + qx[1]) + qx[2]) + qx[3]) / 4.0;
    const double my = (((qy[0] + qy[1]) + qy[2]) + qy[3]) / 4.0;
    double size = fabs(qx[0] - mx);
    for (int c = 0; c < 4; ++c) {
      size = fmax(size, fabs(qx[c] - mx));
      size = fmax(size, fabs(qy[c] - my));
    }
    size = size + 1.0;
    const bool rect = fabs(e0x * e1x + e0y * e1y) <= rtol * scale &&
                      fmax(fabs(dx), fabs(dy)) <= rtol * size;
    double rx[4], ry[4];
    if (rect) {
      for (int c = 0; c < 4; ++c) { rx[c] = qx[c]; ry[c] = qy[c]; }
    } else {
      int best = 0;
      double best_area = 0.0, ux = 0.0, uy = 0.0, lo_u = 0.0, hi_u = 0.0, lo_v = 0.0, hi_v = 0.0;
      for (int e = 0; e < 4; ++e) {
        const int f = (e + 1) & 3;
        const double ex = qx[f] - qx[e], ey = qy[f] - qy[e];
        const double len = fmax(norm2(ex, ey), 1e-300);
        const double cux = ex / len, cuy = ey / len;
        const double cvx = -cuy, cvy = cux;
        double lu = 0.0, hu = 0.0, lv = 0.0, hv = 0.0;
        for (int p = 0; p < 4; ++p) {
          const double pu = cux * qx[p] + cuy * qy[p];
          const double pv = cvx * qx[p] + cvy * qy[p];
          lu = p ? fmin(lu, pu) : pu;
          hu = p ? fmax(hu, pu) : pu;
          lv = p ? fmin(lv, pv) : pv;
          hv = p ? fmax(hv, pv) : pv;
        }
        const double area = (hu - lu) * (hv - lv);
        if (e == 0 || area < best_area) {  // the first of equal areas, as argmin
          best = e; best_area = area; ux = cux; uy = cuy;
          lo_u = lu; hi_u = hu; lo_v = lv; hi_v = hv;
        }
      }
      (void)best;
      const double vx = -uy, vy = ux;
      const double cu[4] = {lo_u, hi_u, hi_u, lo_u};
      const double cv[4] = {lo_v, lo_v, hi_v, hi_v};
      double tx[4], ty[4];
      for (int c = 0; c < 4; ++c) {
        tx[c] = cu[c] * ux + cv[c] * vx;
        ty[c] = cu[c] * uy + cv[c] * vy;
      }
      if (turn_of(tx, ty) != turn_of(qx, qy)) {  // reversed (NaN turns compare unequal too)
        for (int c = 0; c < 2; ++c) {
          double a = tx[c]; tx[c] = tx[3 - c]; tx[3 - c] = a;
          a = ty[c]; ty[c] = ty[3 - c]; ty[3 - c] = a;
        }
      }
      int start = 0;
      double best_d = 0.0;
      for (int c = 0; c < 4; ++c) {
        const double d = norm2(tx[c] - qx[0], ty[c] - qy[0]);
        if (c == 0 || d < best_d) { start = c; best_d = d; }
      }
      for (int c = 0; c < 4; ++c) {
        rx[c] = tx[(start + c) & 3];
        ry[c] = ty[(start + c) & 3];
      }
    }
    for (int c = 0; c < 4; ++c) {
      out[8 * i + 2 * c] = (float)rx[c];
      out[8 * i + 2 * c + 1] = (float)ry[c];
    }
  }
}

// ------------------------------------------------------------------------- polygons
// Sutherland-Hodgman streamed: the 4 sides of every stage's canvas are levels of a pipeline
// (level l: stage l / 4, side l % 4 in the order x >= 0, x <= W, y >= 0, y <= H), each holding
// O(1) state (its first and previous point), so that no polygon needs a buffer between passes.
// A level emits, for each point it receives after its first, the cut of the edge from the
// previous point (where the edge crosses its line) and the point itself (where inside); closing,
// the edge from its last point to its first. The reference (instances._clip_side) emits a
// polygon's closing edge first: the streamed output is the reference's turned left by some r.
// r is tracked with one bit per point: a point is "late" when it came from a level's close or
// from a late point; a level whose first point is late had all of its input late (it came from
// closes only) and counts its input as early. The number of late points that leave the last
// level (mod the output count) is r; the output is turned right by r at the end.
struct Level {
  double fx, fy, px, py;
  int count, f_in, p_in, all_early;
};

__device__ __forceinline__ bool side_inside(int side, double x, double y, double w, double h) {
  switch (side) {  // sign * (p[axis] - bound) >= 0, as the reference
    case 0: return 1.0 * (x - 0.0) >= 0.0;
    case 1: return -1.0 * (x - w) >= 0.0;
    case 2: return 1.0 * (y - 0.0) >= 0.0;
    default: return -1.0 * (y - h) >= 0.0;
  }
}

__device__ __forceinline__ void side_cut(int side, double ax, double ay, double bx, double by,
                                         double w, double h, double& cx, double& cy) {
  const int axis = side >> 1;
  const double c = side == 0 || side == 2 ? 0.0 : (side == 1 ? w : h);
  const double a = axis ? ay : ax, b = axis ? by : bx;
  const double t = (c - a) / (b - a);
  cx = ax + t * (bx - ax);
  cy = ay + t * (by - ay);
  if (axis) cy = c; else cx = c;
}

struct Pending {
  double x, y;
  int level, late;
};

// The emissions of one level for the edge (a -> b), b inside or not; pushed so that the cut is
// processed first (a stack: the point goes below it).
__device__ __forceinline__ int level_edge(int side, double ax, double ay, int a_in, double bx,
                                          double by, int b_in, double w, double h, int level,
                                          int late, Pending* stack, int top) {
  if (b_in) stack[top++] = {bx, by, level + 1, late};
  if (a_in != b_in) {
    double cx, cy;
    side_cut(side, ax, ay, bx, by, w, h, cx, cy);
    stack[top++] = {cx, cy, level + 1, late};
  }
  return top;
}

// One thread per box, its row of (P_in, 2) points (NaN rows end each polygon; the rest of the
// row NaN) into its row of (P_out, 2): each polygon mapped and clipped at every stage, dropped
// under 3 points, followed by a NaN row. A row that needs more than P_out rows is written as the
// marker (marker, -marker) in its first row, NaN after; a row whose first point is the marker
// stays the marker. tight (N, 4) gets the enclosing box of the row's output points (NaN: none).
// levels: (N, 4 S) scratch; stack: (N, 2 * 4 S + 4) scratch.
extern "C" __global__ void polygons_transform(
    const double* __restrict__ rows, const int* __restrict__ sample, long long n, int p_in,
    const double* __restrict__ matrices, const long long* __restrict__ sizes, int num_stages,
    int num_samples, int p_out, double nan_value, double marker, Level* __restrict__ levels,
    Pending* __restrict__ stacks, double* __restrict__ out, double* __restrict__ tight) {
  const int num_levels = 4 * num_stages;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const double* src = rows + 2 * (long long)p_in * i;
    double* dst = out + 2 * (long long)p_out * i;
    Level* lv = levels + (long long)num_levels * i;
    Pending* stack = stacks + (long long)(2 * num_levels + 4) * i;
    const int s = sample[i];
    bool overflow = p_in > 0 && src[0] == marker && src[1] == -marker;
    const bool bad = s < 0 || s >= num_samples;
    int cursor = 0;  // rows written
    double x0 = 0.0, y0 = 0.0, x1 = 0.0, y1 = 0.0;
    bool any = false;
    int r = 0;
    while (r < p_in && !overflow && !bad) {
      if (src[2 * r] != src[2 * r]) { ++r; continue; }  // a NaN row: between polygons
      for (int l = 0; l < num_levels; ++l) lv[l].count = 0;
      int emitted = 0, late_out = 0;
      // the points of this polygon, then the closes level by level; each drained depth-first
      for (int l = -1; l < num_levels; ++l) {
        int top = 0;
        if (l >= 0) {  // close level l: the edge from its last point to its first
          const Level& c = lv[l];
          if (c.count > 0) {
            const long long at = (long long)(l >> 2) * num_samples + s;
            const double h = (double)sizes[2 * at], w = (double)sizes[2 * at + 1];
            top = level_edge(l & 3, c.px, c.py, c.p_in, c.fx, c.fy, c.f_in, w, h, l, 1, stack,
                             0);
          }
        }
        bool more = l < 0;
        while (true) {
          if (top == 0) {
            if (!more) break;
            if (r >= p_in || src[2 * r] != src[2 * r]) { more = false; continue; }
            stack[top++] = {src[2 * r], src[2 * r + 1], 0, 0};
            ++r;
          }
          Pending q = stack[--top];
          if (q.level == num_levels) {  // out of the last level: an output point
            if (cursor + emitted < p_out) {
              dst[2 * (cursor + emitted)] = q.x;
              dst[2 * (cursor + emitted) + 1] = q.y;
            }
            ++emitted;
            late_out += q.late;
            continue;
          }
          Level& c = lv[q.level];
          const int side = q.level & 3;
          const long long at = (long long)(q.level >> 2) * num_samples + s;
          if (side == 0) map_point(matrices + 9 * at, q.x, q.y);
          const double h = (double)sizes[2 * at], w = (double)sizes[2 * at + 1];
          const int in = side_inside(side, q.x, q.y, w, h) ? 1 : 0;
          if (c.count == 0) {
            c.all_early = q.late;
            c.fx = c.px = q.x;
            c.fy = c.py = q.y;
            c.f_in = c.p_in = in;
            c.count = 1;
            continue;
          }
          const int late = c.all_early ? 0 : q.late;
          top = level_edge(side, c.px, c.py, c.p_in, q.x, q.y, in, w, h, q.level, late, stack,
                           top);
          c.px = q.x;
          c.py = q.y;
          c.p_in = in;
          ++c.count;
        }
      }
      if (emitted < 3) continue;  // dropped: the next polygon writes over it
      if (cursor + emitted + 1 > p_out) { overflow = true; break; }
      // turn right by late_out (mod emitted): three reversals in place
      const int turn = late_out % emitted;
      double* poly = dst + 2 * cursor;
      for (int part = 0; part < 3; ++part) {
        int a = part == 1 ? 0 : (part == 2 ? turn : 0);
        int b = part == 0 ? emitted - 1 : (part == 1 ? turn - 1 : emitted - 1);
        for (; a < b; ++a, --b) {
          double t = poly[2 * a]; poly[2 * a] = poly[2 * b]; poly[2 * b] = t;
          t = poly[2 * a + 1]; poly[2 * a + 1] = poly[2 * b + 1]; poly[2 * b + 1] = t;
        }
      }
      for (int e = 0; e < emitted; ++e) {
        const double px = poly[2 * e], py = poly[2 * e + 1];
        x0 = any ? fmin(x0, px) : px;
        y0 = any ? fmin(y0, py) : py;
        x1 = any ? fmax(x1, px) : px;
        y1 = any ? fmax(y1, py) : py;
        any = true;
      }
      cursor += emitted;
      dst[2 * cursor] = nan_value;
      dst[2 * cursor + 1] = nan_value;
      ++cursor;
    }
    if (overflow && p_out > 0) {
      dst[0] = marker;
      dst[1] = -marker;
      cursor = 1;
      any = false;
    } else if (overflow) {
      any = false;  // (no row to mark: the output has no width)
    }
    for (int k = cursor; k < p_out; ++k) {
      dst[2 * k] = nan_value;
      dst[2 * k + 1] = nan_value;
    }
    tight[4 * i + 0] = any ? x0 : nan_value;
    tight[4 * i + 1] = any ? y0 : nan_value;
    tight[4 * i + 2] = any ? x1 : nan_value;
    tight[4 * i + 3] = any ? y1 : nan_value;
  }
}

// ------------------------------------------------------------------------- padding
// One thread per (field, output row b * M + m, item): source row index[b, m] (-1: none, the
// field's fill) copied item by item, bit for bit. Fields are raw buffers: src/dst device
// addresses, item size in bytes (1, 2, 4, 8), items per row, fill bits (low bytes).
extern "C" __global__ void pad_shaped(
    const long long* __restrict__ index, long long rows, int num_fields,
    const unsigned long long* __restrict__ field_src,
    const unsigned long long* __restrict__ field_dst,
    const unsigned long long* __restrict__ field_size,
    const unsigned long long* __restrict__ field_items,
    const unsigned long long* __restrict__ field_fill, long long max_items) {
  const long long total = (long long)num_fields * rows * max_items;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long f = t / (rows * max_items);
    const long long rest = t - f * rows * max_items;
    const long long row = rest / max_items, item = rest - row * max_items;
    const long long items = (long long)field_items[f];
    if (item >= items) continue;
    const long long j = row * items + item;
    const long long from = index[row];
    const int size = (int)field_size[f];
    const unsigned long long s = field_src[f], d = field_dst[f];
    unsigned long long bits = field_fill[f];
    if (from >= 0) {
      const long long i = from * items + item;
      switch (size) {
        case 1: bits = ((const unsigned char*)s)[i]; break;
        case 2: bits = ((const unsigned short*)s)[i]; break;
        case 4: bits = ((const unsigned int*)s)[i]; break;
        default: bits = ((const unsigned long long*)s)[i]; break;
      }
    }
    switch (size) {
      case 1: ((unsigned char*)d)[j] = (unsigned char)bits; break;
      case 2: ((unsigned short*)d)[j] = (unsigned short)bits; break;
      case 4: ((unsigned int*)d)[j] = (unsigned int)bits; break;
      default: ((unsigned long long*)d)[j] = bits; break;
    }
  }
}

// ------------------------------------------------------------------------- masks
// One thread per output pixel of every sample (the sample found by bisection of pixel_offsets,
// (B + 1,)); the pixel's centre goes back through the inverse of the sample's composed matrix
// (inverse (B, 9)); it is kept where it lands on a source pixel (0 <= x < W, 0 <= y < H) and on
// every intermediate canvas (partial (S - 1, B, 9): the source to op k's output, canvas sizes
// (S - 1, B, 2)); each of the sample's masks then takes its nearest source pixel's value != 0
// (instances.warp_masks), else 0. meta (B, 5) int64: mask count, H, W, H', W'; src, dst (B,):
// device addresses of the sample's (n, H, W) and (n, H', W') uint8 masks.
extern "C" __global__ void masks_warp(
    const long long* __restrict__ pixel_offsets, int num_samples,
    const long long* __restrict__ meta, const unsigned long long* __restrict__ src,
    const unsigned long long* __restrict__ dst, const double* __restrict__ inverse,
    const double* __restrict__ partial, const long long* __restrict__ sizes,
    int num_partial) {
  const long long total = pixel_offsets[num_samples];
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    int lo = 0, hi = num_samples;  // pixel_offsets[lo] <= t < pixel_offsets[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (pixel_offsets[mid] <= t) lo = mid; else hi = mid;
    }
    const int b = lo;
    const long long* mb = meta + 5 * (long long)b;
    const long long n = mb[0], h = mb[1], w = mb[2], wo = mb[4];
    const long long p = t - pixel_offsets[b];
    const long long i = p / wo, j = p - i * wo;
    double x = (double)j + 0.5, y = (double)i + 0.5;
    map_point(inverse + 9 * (long long)b, x, y);
    bool ok = x >= 0.0 && x < (double)w && y >= 0.0 && y < (double)h;
    for (int k = 0; k < num_partial && ok; ++k) {
      const long long at = (long long)k * num_samples + b;
      double ax = x, ay = y;
      map_point(partial + 9 * at, ax, ay);
      ok = ax >= 0.0 && ax < (double)sizes[2 * at + 1] && ay >= 0.0 &&
           ay < (double)sizes[2 * at];
    }
    const long long ix = ok ? (long long)floor(x) : 0, iy = ok ? (long long)floor(y) : 0;
    const unsigned char* s = (const unsigned char*)src[b];
    unsigned char* d = (unsigned char*)dst[b];
    const long long plane = h * w, plane_out = mb[3] * wo;
    for (long long m = 0; m < n; ++m)
      d[m * plane_out + p] = ok ? (s[m * plane + iy * w + ix] != 0) : 0;
  }
}

// ------------------------------------------------------------------------- mask boxes
// One block of MASK_BOX_THREADS threads per mask (grid-stride over the N masks of planes
// (N, H, W) uint8): each thread scans its share of the plane, 4 pixels a load where words is
// set (the plane's size and address are multiples of 4), and keeps the first and last flat
// index of a nonzero pixel and its least and greatest column; the block reduces them in shared
// memory. box (N, 4): [j_min, i_min, j_max + 1, i_max + 1] (instances.mask_boxes: pixel (i, j)
// covers [j, j + 1] x [i, i + 1]), nan_value for an empty mask.
#define MASK_BOX_THREADS 256
__device__ __forceinline__ void mask_box_take(long long q, long long w, long long& first,
                                              long long& last, long long& cmin,
                                              long long& cmax) {
  if (first < 0) first = q;  // a thread meets its pixels in increasing order
  last = q;
  const long long c = q % w;
  cmin = c < cmin ? c : cmin;
  cmax = c > cmax ? c : cmax;
}

extern "C" __global__ void __launch_bounds__(MASK_BOX_THREADS) mask_boxes(
    const unsigned char* __restrict__ planes, long long n, long long h, long long w, int words,
    double nan_value, double* __restrict__ box) {
  __shared__ long long red[4][MASK_BOX_THREADS];
  const long long plane = h * w;
  const int t = threadIdx.x;
  for (long long m = blockIdx.x; m < n; m += gridDim.x) {
    const unsigned char* p = planes + m * plane;
    long long first = -1, last = -1, cmin = w, cmax = -1;
    if (words) {
      const unsigned int* q = (const unsigned int*)p;
      for (long long k = t; k < plane / 4; k += blockDim.x) {
        const unsigned int v = q[k];
        if (v == 0u) continue;
        for (int b = 0; b < 4; ++b)  // little-endian: byte b is pixel 4 k + b
          if ((v >> (8 * b)) & 0xffu) mask_box_take(4 * k + b, w, first, last, cmin, cmax);
      }
    } else {
      for (long long k = t; k < plane; k += blockDim.x)
        if (p[k]) mask_box_take(k, w, first, last, cmin, cmax);
    }
    red[0][t] = first < 0 ? plane : first;
    red[1][t] = last;
    red[2][t] = cmin;
    red[3][t] = cmax;
    __syncthreads();
    for (int half = MASK_BOX_THREADS / 2; half > 0; half >>= 1) {
      if (t < half) {
        const int o = t + half;
        red[0][t] = red[0][o] < red[0][t] ? red[0][o] : red[0][t];
        red[1][t] = red[1][o] > red[1][t] ? red[1][o] : red[1][t];
        red[2][t] = red[2][o] < red[2][t] ? red[2][o] : red[2][t];
        red[3][t] = red[3][o] > red[3][t] ? red[3][o] : red[3][t];
      }
      __syncthreads();
    }
    if (t == 0) {
      const bool any = red[1][0] >= 0;
      box[4 * m + 0] = any ? (double)red[2][0] : nan_value;
      box[4 * m + 1] = any ? (double)(red[0][0] / w) : nan_value;
      box[4 * m + 2] = any ? (double)(red[3][0] + 1) : nan_value;
      box[4 * m + 3] = any ? (double)(red[1][0] / w + 1) : nan_value;
    }
    __syncthreads();  // red is read before the next mask overwrites it
  }
}
