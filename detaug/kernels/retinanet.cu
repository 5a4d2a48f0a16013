// RetinaNet target encoding (twin: detaug/targets/retinanet.py encode_targets_numpy).
//
// Grid: (ceil(A / RN_BLOCK), B); block: RN_BLOCK threads, one anchor each. The boxes of the
// block's image are staged in shared memory RN_BLOCK at a time. Both kernels must be launched
// with blockDim.x == RN_BLOCK (the wrapper does). flags: bit 0 `valid` is given, bit 1
// `image_sizes` (B, 2) (H_valid, W_valid) is given (else default_h / default_w hold for every
// image), bit 2 `forced_keys` holds retinanet_best_anchor's result.

#define RN_BLOCK 128
#define RN_FLAG_VALID 1
#define RN_FLAG_SIZES 2
#define RN_FLAG_FORCED 4

// IoU exactly as the reference: zero unless the intersection has positive width and height.
__device__ __forceinline__ float rn_iou(float ax0, float ay0, float ax1, float ay1, float aarea,
                                        float bx0, float by0, float bx1, float by1, float barea) {
    const float iw = fminf(ax1, bx1) - fmaxf(ax0, bx0);
    const float ih = fminf(ay1, by1) - fmaxf(ay0, by0);
    if (iw > 0.0f && ih > 0.0f) {
        const float inter = __fmul_rn(iw, ih);
        return __fdiv_rn(inter, __fsub_rn(__fadd_rn(aarea, barea), inter));
    }
    return 0.0f;
}

// True when the anchor centre lies inside image b's valid (unpadded) region.
__device__ __forceinline__ bool rn_inside(float ax0, float ay0, float ax1, float ay1,
                                          const float* __restrict__ image_sizes, int b, int flags,
                                          float default_h, float default_w) {
    float h = default_h, w = default_w;
    if (flags & RN_FLAG_SIZES) {
        h = image_sizes[2 * b];
        w = image_sizes[2 * b + 1];
    }
    const float cx = __fmul_rn(__fadd_rn(ax0, ax1), 0.5f);
    const float cy = __fmul_rn(__fadd_rn(ay0, ay1), 0.5f);
    return cx < w && cy < h;
}

// Per box n of each image: keys[n] = max over inside anchors a with iou > 0 of
// (float_bits(iou) << 32) | ~a, i.e. the best anchor, ties to the lowest index. keys must be
// zero on entry (0 = no anchor).
extern "C" __global__ void retinanet_best_anchor(
        const float* __restrict__ anchors, const float* __restrict__ boxes,
        const unsigned char* __restrict__ valid, const long long* __restrict__ offsets,
        const float* __restrict__ image_sizes, unsigned long long* __restrict__ keys,
        int num_anchors, int flags, float default_h, float default_w) {
    __shared__ float s_box[RN_BLOCK][4];
    __shared__ float s_area[RN_BLOCK];
    __shared__ int s_ok[RN_BLOCK];
    __shared__ unsigned long long s_key[RN_BLOCK];

    const int b = blockIdx.y;
    const int t = threadIdx.x;
    const int a = blockIdx.x * RN_BLOCK + t;
    const bool active = a < num_anchors;
    float ax0 = 0.f, ay0 = 0.f, ax1 = 1.f, ay1 = 1.f;
    if (active) {
        ax0 = anchors[4 * a]; ay0 = anchors[4 * a + 1];
        ax1 = anchors[4 * a + 2]; ay1 = anchors[4 * a + 3];
    }
    const float aarea = __fmul_rn(ax1 - ax0, ay1 - ay0);
    const bool usable = active && rn_inside(ax0, ay0, ax1, ay1, image_sizes, b, flags, default_h, default_w);
    const unsigned long long low = (unsigned long long)(~(unsigned int)a);

    const long long n0 = offsets[b], n1 = offsets[b + 1];
    for (long long c0 = n0; c0 < n1; c0 += RN_BLOCK) {
        const int cn = (int)min((long long)RN_BLOCK, n1 - c0);
        __syncthreads();  // the previous chunk is fully consumed
        if (t < cn) {
            const long long n = c0 + t;
            const float x0 = boxes[4 * n], y0 = boxes[4 * n + 1], x1 = boxes[4 * n + 2], y1 = boxes[4 * n + 3];
            s_box[t][0] = x0; s_box[t][1] = y0; s_box[t][2] = x1; s_box[t][3] = y1;
            s_area[t] = __fmul_rn(x1 - x0, y1 - y0);
            s_ok[t] = (flags & RN_FLAG_VALID) ? (valid[n] != 0) : 1;
            s_key[t] = 0ull;
        }
        __syncthreads();
        for (int k = 0; k < cn; ++k) {  // block-uniform trip count: every lane reaches the shuffles
            unsigned long long key = 0ull;
            if (usable && s_ok[k]) {
                const float iou = rn_iou(ax0, ay0, ax1, ay1, aarea, s_box[k][0], s_box[k][1],
                                         s_box[k][2], s_box[k][3], s_area[k]);
                if (iou > 0.0f) key = ((unsigned long long)__float_as_uint(iou) << 32) | low;
            }
            for (int off = 16; off > 0; off >>= 1) {
                const unsigned long long other = __shfl_xor_sync(0xffffffffu, key, off);
                key = other > key ? other : key;
            }
            if ((t & 31) == 0 && key != 0ull) atomicMax(&s_key[k], key);
        }
        __syncthreads();
        if (t < cn && s_key[t] != 0ull) atomicMax(&keys[c0 + t], s_key[t]);
    }
}

// One anchor per thread: max IoU / argmax over the image's valid boxes (ties -> lowest box),
// state, forced match, padding rule; then the block writes its rows of regression (B, A, 5)
// and labels (B, A, C + 1) with coalesced stores (every value, so no memset is needed).
extern "C" __global__ void retinanet_encode(
        const float* __restrict__ anchors, const float* __restrict__ boxes,
        const int* __restrict__ labels, const unsigned char* __restrict__ valid,
        const long long* __restrict__ offsets, const float* __restrict__ image_sizes,
        const unsigned long long* __restrict__ forced_keys,
        float* __restrict__ regression, float* __restrict__ labels_out,
        int num_anchors, int num_classes, int flags, float default_h, float default_w,
        float positive_overlap, float negative_overlap,
        float mean0, float mean1, float mean2, float mean3,
        float inv_std0, float inv_std1, float inv_std2, float inv_std3) {
    __shared__ float s_box[RN_BLOCK][4];
    __shared__ float s_area[RN_BLOCK];
    __shared__ int s_ok[RN_BLOCK];
    __shared__ int s_forced[RN_BLOCK];
    __shared__ float s_reg[RN_BLOCK * 5];
    __shared__ float s_state[RN_BLOCK];
    __shared__ int s_cls[RN_BLOCK];

    const int b = blockIdx.y;
    const int t = threadIdx.x;
    const int a_begin = blockIdx.x * RN_BLOCK;
    const int a = a_begin + t;
    const bool active = a < num_anchors;
    float ax0 = 0.f, ay0 = 0.f, ax1 = 1.f, ay1 = 1.f;
    if (active) {
        ax0 = anchors[4 * a]; ay0 = anchors[4 * a + 1];
        ax1 = anchors[4 * a + 2]; ay1 = anchors[4 * a + 3];
    }
    const float aw = ax1 - ax0, ah = ay1 - ay0;
    const float aarea = __fmul_rn(aw, ah);

    float best = -1.0f;
    long long best_n = -1, forced_n = -1;
    const long long n0 = offsets[b], n1 = offsets[b + 1];
    for (long long c0 = n0; c0 < n1; c0 += RN_BLOCK) {
        const int cn = (int)min((long long)RN_BLOCK, n1 - c0);
        __syncthreads();  // the previous chunk is fully consumed
        if (t < cn) {
            const long long n = c0 + t;
            const float x0 = boxes[4 * n], y0 = boxes[4 * n + 1], x1 = boxes[4 * n + 2], y1 = boxes[4 * n + 3];
            s_box[t][0] = x0; s_box[t][1] = y0; s_box[t][2] = x1; s_box[t][3] = y1;
            s_area[t] = __fmul_rn(x1 - x0, y1 - y0);
            s_ok[t] = (flags & RN_FLAG_VALID) ? (valid[n] != 0) : 1;
            int forced = -1;
            if (flags & RN_FLAG_FORCED) {
                const unsigned long long key = forced_keys[n];
                if (key != 0ull) forced = (int)(~(unsigned int)(key & 0xffffffffull));
            }
            s_forced[t] = forced;
        }
        __syncthreads();
        if (active) {
            for (int k = 0; k < cn; ++k) {
                if (!s_ok[k]) continue;
                const float iou = rn_iou(ax0, ay0, ax1, ay1, aarea, s_box[k][0], s_box[k][1],
                                         s_box[k][2], s_box[k][3], s_area[k]);
                if (iou > best) { best = iou; best_n = c0 + k; }
                if (s_forced[k] == a) forced_n = c0 + k;  // ascending boxes: the last one wins
            }
        }
    }

    float state = 0.0f;
    long long gt = best_n;
    if (best_n >= 0) {
        if (best >= positive_overlap) state = 1.0f;
        else if (best > negative_overlap) state = -1.0f;
    }
    if (forced_n >= 0) { state = 1.0f; gt = forced_n; }
    if (active && !rn_inside(ax0, ay0, ax1, ay1, image_sizes, b, flags, default_h, default_w)) state = -1.0f;

    float r0 = 0.f, r1 = 0.f, r2 = 0.f, r3 = 0.f;
    if (active && gt >= 0) {
        const float gx0 = boxes[4 * gt], gy0 = boxes[4 * gt + 1], gx1 = boxes[4 * gt + 2], gy1 = boxes[4 * gt + 3];
        r0 = ((gx0 - ax0) / aw - mean0) * inv_std0;
        r1 = ((gy0 - ay0) / ah - mean1) * inv_std1;
        r2 = ((gx1 - ax1) / aw - mean2) * inv_std2;
        r3 = ((gy1 - ay1) / ah - mean3) * inv_std3;
    }
    s_reg[5 * t] = r0; s_reg[5 * t + 1] = r1; s_reg[5 * t + 2] = r2; s_reg[5 * t + 3] = r3;
    s_reg[5 * t + 4] = state;
    s_state[t] = state;
    s_cls[t] = (active && state == 1.0f) ? labels[gt] : -1;
    __syncthreads();

    const int na = min(RN_BLOCK, num_anchors - a_begin);
    const size_t row0 = (size_t)b * (size_t)num_anchors + (size_t)a_begin;
    float* __restrict__ reg_out = regression + row0 * 5;
    for (int i = t; i < na * 5; i += RN_BLOCK) reg_out[i] = s_reg[i];

    // Flat index i = al * K + c over the block's na rows of K = C + 1 values, advanced by
    // RN_BLOCK with a carry instead of a division per element.
    const int K = num_classes + 1;
    const int dq = RN_BLOCK / K, dr = RN_BLOCK % K;
    int al = t / K, c = t % K;
    float* __restrict__ lab_out = labels_out + row0 * (size_t)K;
    const int total = na * K;
    for (int i = t; i < total; i += RN_BLOCK) {
        lab_out[i] = (c == num_classes) ? s_state[al] : (c == s_cls[al] ? 1.0f : 0.0f);
        c += dr; al += dq;
        if (c >= K) { c -= K; al += 1; }
    }
}
