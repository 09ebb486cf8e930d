// Fused CPU kernel for the noise layers' fresh draws: y = x + scale * z.
//
// z is the unit noise the portable path (layers/noise.py: unit_gaussian / unit_laplace) builds
// from the uint32 words of tf.random.stateless_uniform(..., dtype=uint32) for the same
// (key, counter): the words here are the same Philox-4x32-10 words, bit for bit (word j is
// lane j % 4 of the block at counter + j / 4), and they are turned into noise by the same
// float32 formulas. Only log, cos and sin come from a different (vectorised) implementation,
// so a draw can differ from the portable path's in its last bits.
//
// Gaussian: pair p takes words 3p, 3p+1 (radius' uniform on (0, 1], resolution 2^-64) and
// 3p+2 (angle); z[2p] = r cos(a), z[2p+1] = r sin(a). Laplace: element i takes words 2i
// (uniform, with the high 31 bits of word 2i+1) and the lowest bit of 2i+1 (sign).
//
// Compiled on first use by tfdp.kernels (g++, -O3, the host's vector extensions, glibc's
// libmvec for the vectorised log/cos/sin).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

constexpr int kLanes = 16;           // Philox blocks generated together (vectorised)
constexpr int64_t kChunk = 256;      // outputs per chunk: Gaussian pairs or Laplace draws
constexpr float kTwoM32 = 2.3283064365386963e-10f;   // 2^-32
constexpr float kTwoM64 = 5.421010862427522e-20f;    // 2^-64
constexpr float kTwoM63 = 1.0842021724855044e-19f;   // 2^-63
constexpr float kAngle = 1.4629180792671596e-09f;    // 2 pi 2^-32, rounded to float32

struct Philox {
  uint32_t counter[4];
  uint32_t key[2];
};

typedef uint32_t U32x16 __attribute__((vector_size(64)));
typedef int32_t I32x16 __attribute__((vector_size(64)));

// Words of blocks [first, first + kLanes) into out[4 * kLanes] (block-major, lane order).
inline void PhiloxBlocks(const Philox& base, uint64_t first, uint32_t* __restrict out) {
  const uint64_t lo = (static_cast<uint64_t>(base.counter[1]) << 32) | base.counter[0];
  const uint64_t hi = (static_cast<uint64_t>(base.counter[3]) << 32) | base.counter[2];
  alignas(64) uint32_t o0[kLanes], o1[kLanes], o2[kLanes], o3[kLanes];
#ifdef __AVX512F__
  // 128-bit counter + (first + i) (PhiloxRandom::Skip): lanes differ in the low word only,
  // unless a carry leaves it within these 16 blocks (then the generic per-lane sums).
  const uint64_t start = lo + first;
  const uint64_t top = hi + (start < lo ? 1u : 0u);
  __m512i c0, c1, c2, c3;
  if (static_cast<uint32_t>(start) <= 0xFFFFFFFFu - (kLanes - 1)) {
    c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(start))),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(start >> 32)));
    c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(top)));
    c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(top >> 32)));
  } else {
    for (int i = 0; i < kLanes; ++i) {
      const uint64_t sum = lo + (first + static_cast<uint64_t>(i));
      const uint64_t t = hi + (sum < lo ? 1u : 0u);
      o0[i] = static_cast<uint32_t>(sum);
      o1[i] = static_cast<uint32_t>(sum >> 32);
      o2[i] = static_cast<uint32_t>(t);
      o3[i] = static_cast<uint32_t>(t >> 32);
    }
    c0 = _mm512_load_si512(o0);
    c1 = _mm512_load_si512(o1);
    c2 = _mm512_load_si512(o2);
    c3 = _mm512_load_si512(o3);
  }
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
  uint32_t k0 = base.key[0], k1 = base.key[1];
  for (int round = 0; round < 10; ++round) {
    // 32 x 32 -> 64 products of even and odd lanes, split into low and high words.
    const __m512i e0 = _mm512_mul_epu32(c0, m0), d0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
    const __m512i e1 = _mm512_mul_epu32(c2, m1), d1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
    const __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, e0, _mm512_slli_epi64(d0, 32));
    const __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(e0, 32), d0);
    const __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, e1, _mm512_slli_epi64(d1, 32));
    const __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(e1, 32), d1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1),
                                        _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3),
                                        _mm512_set1_epi32(static_cast<int>(k1)));
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm512_store_si512(o0, c0);
  _mm512_store_si512(o1, c1);
  _mm512_store_si512(o2, c2);
  _mm512_store_si512(o3, c3);
#else
#pragma omp simd
  for (int i = 0; i < kLanes; ++i) {
    // 128-bit counter + (first + i), with carry (PhiloxRandom::Skip), then 10 rounds.
    const uint64_t sum = lo + (first + static_cast<uint64_t>(i));
    const uint64_t top = hi + (sum < lo ? 1u : 0u);
    uint32_t c0 = static_cast<uint32_t>(sum), c1 = static_cast<uint32_t>(sum >> 32);
    uint32_t c2 = static_cast<uint32_t>(top), c3 = static_cast<uint32_t>(top >> 32);
    uint32_t k0 = base.key[0], k1 = base.key[1];
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    o0[i] = c0;
    o1[i] = c1;
    o2[i] = c2;
    o3[i] = c3;
  }
#endif
  // 4 x 16 transpose to block-major order with two levels of two-input shuffles.
  static_assert(kLanes == 16, "the transpose below is written for 16 lanes");
  U32x16 v0, v1, v2, v3;
  std::memcpy(&v0, o0, sizeof v0);
  std::memcpy(&v1, o1, sizeof v1);
  std::memcpy(&v2, o2, sizeof v2);
  std::memcpy(&v3, o3, sizeof v3);
  const I32x16 zip_lo = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
  const I32x16 zip_hi = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const I32x16 pair_lo = {0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23};
  const I32x16 pair_hi = {8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31};
  const U32x16 a_lo = __builtin_shuffle(v0, v1, zip_lo), a_hi = __builtin_shuffle(v0, v1, zip_hi);
  const U32x16 b_lo = __builtin_shuffle(v2, v3, zip_lo), b_hi = __builtin_shuffle(v2, v3, zip_hi);
  const U32x16 w0 = __builtin_shuffle(a_lo, b_lo, pair_lo);  // blocks 0-3
  const U32x16 w1 = __builtin_shuffle(a_lo, b_lo, pair_hi);  // blocks 4-7
  const U32x16 w2 = __builtin_shuffle(a_hi, b_hi, pair_lo);  // blocks 8-11
  const U32x16 w3 = __builtin_shuffle(a_hi, b_hi, pair_hi);  // blocks 12-15
  std::memcpy(out, &w0, sizeof w0);
  std::memcpy(out + 16, &w1, sizeof w1);
  std::memcpy(out + 32, &w2, sizeof w2);
  std::memcpy(out + 48, &w3, sizeof w3);
}

// Words [4 * first_block, 4 * first_block + count) into out (count a multiple of 4 * kLanes).
inline void Words(const Philox& base, uint64_t first_block, int64_t count,
                  uint32_t* __restrict out) {
  for (int64_t w = 0; w < count; w += 4 * kLanes) {
    PhiloxBlocks(base, first_block + static_cast<uint64_t>(w / 4), out + w);
  }
}

// y[first + k] = x[first + k] + z[k] * scale[(first + k) % nscale] for k < count, in runs
// that do not wrap around the scale (one division per run, vectorised inner loops).
inline void AddScaled(const float* __restrict z, int64_t first, int64_t count,
                      const float* x, const float* __restrict scale, int64_t nscale,
                      float* y) {
  if (nscale == 1) {
    const float s = scale[0];
#pragma omp simd
    for (int64_t k = 0; k < count; ++k) {
      const float noise = z[k] * s;
      y[first + k] = x[first + k] + noise;
    }
    return;
  }
  int64_t k = 0;
  int64_t j = first % nscale;
  while (k < count) {
    const int64_t run = std::min(count - k, nscale - j);
    const float* __restrict zk = z + k;
    const float* __restrict sj = scale + j;
    const float* xk = x + first + k;
    float* yk = y + first + k;
#pragma omp simd
    for (int64_t t = 0; t < run; ++t) {
      const float noise = zk[t] * sj[t];
      yk[t] = xk[t] + noise;
    }
    k += run;
    j = 0;
  }
}

// Gaussian pairs [p0, p0 + np) -> y[2 p0 ...], at most 2 n outputs written.
void GaussianChunk(const Philox& base, int64_t p0, int64_t np, int64_t n,
                   const float* x, const float* __restrict scale, int64_t nscale,
                   float* y) {
  // 3 kChunk words = 48 * kLanes blocks (kChunk = 256): whole vector batches.
  alignas(64) uint32_t w[3 * kChunk];
  alignas(64) float radius[kChunk], angle[kChunk], zc[kChunk], zs[kChunk];
  Words(base, static_cast<uint64_t>(3 * p0 / 4), 3 * kChunk, w);
#pragma omp simd
  for (int p = 0; p < kChunk; ++p) {
    float u = static_cast<float>(w[3 * p]) * kTwoM32 +
              (static_cast<float>(w[3 * p + 1]) + 0.5f) * kTwoM64;
    u = std::min(u, 1.0f);
    radius[p] = std::sqrt(std::max(-2.0f * logf(u), 0.0f));
    angle[p] = static_cast<float>(w[3 * p + 2]) * kAngle;
  }
#pragma omp simd
  for (int p = 0; p < kChunk; ++p) zc[p] = radius[p] * cosf(angle[p]);
#pragma omp simd
  for (int p = 0; p < kChunk; ++p) zs[p] = radius[p] * sinf(angle[p]);
  alignas(64) float z[2 * kChunk];
#pragma omp simd
  for (int p = 0; p < kChunk; ++p) {
    z[2 * p] = zc[p];
    z[2 * p + 1] = zs[p];
  }
  const int64_t first = 2 * p0;
  AddScaled(z, first, std::min(n, 2 * (p0 + np)) - first, x, scale, nscale, y);
}

// Laplace draws [i0, i0 + ni) -> y[i0 ...].
void LaplaceChunk(const Philox& base, int64_t i0, int64_t ni, const float* x,
                  const float* __restrict scale, int64_t nscale, float* y) {
  alignas(64) uint32_t w[2 * kChunk];
  alignas(64) float z[kChunk];
  Words(base, static_cast<uint64_t>(2 * i0 / 4), 2 * kChunk, w);
#pragma omp simd
  for (int k = 0; k < kChunk; ++k) {
    const uint32_t low = w[2 * k + 1] >> 1;
    // (float(low) + 0.5) * 2^-32 * 2^-31: two exact power-of-two scalings.
    float u = static_cast<float>(w[2 * k]) * kTwoM32 +
              (static_cast<float>(low) + 0.5f) * kTwoM63;
    u = std::min(u, 1.0f);
    const float magnitude = std::max(-logf(u), 0.0f);
    const float negative = static_cast<float>(w[2 * k + 1] & 1u);
    z[k] = magnitude * (1.0f - 2.0f * negative);
  }
  AddScaled(z, i0, ni, x, scale, nscale, y);
}

class TfdpNoisyAddOp : public OpKernel {
 public:
  explicit TfdpNoisyAddOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string distribution;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("distribution", &distribution));
    gaussian_ = distribution == "gaussian";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& scale = ctx->input(1);
    const Tensor& key = ctx->input(2);
    const Tensor& counter = ctx->input(3);
    OP_REQUIRES(ctx, key.NumElements() == 1,
                tensorflow::errors::InvalidArgument("key must have 1 element"));
    OP_REQUIRES(ctx, counter.NumElements() == 2,
                tensorflow::errors::InvalidArgument("counter must have 2 elements"));
    const int64_t n = x.NumElements();
    const int64_t nscale = scale.NumElements();
    OP_REQUIRES(ctx, nscale >= 1 && (n == 0 || n % nscale == 0),
                tensorflow::errors::InvalidArgument(
                    "scale has ", nscale, " elements, which do not tile x's ", n));
    Tensor* y = nullptr;
    // y may take over x's buffer when nothing else reads x (one pass, no new allocation).
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    if (n == 0) return;

    Philox base;
    const uint64_t k = key.flat<uint64_t>()(0);
    const uint64_t c0 = counter.flat<uint64_t>()(0), c1 = counter.flat<uint64_t>()(1);
    base.key[0] = static_cast<uint32_t>(k);
    base.key[1] = static_cast<uint32_t>(k >> 32);
    base.counter[0] = static_cast<uint32_t>(c0);
    base.counter[1] = static_cast<uint32_t>(c0 >> 32);
    base.counter[2] = static_cast<uint32_t>(c1);
    base.counter[3] = static_cast<uint32_t>(c1 >> 32);

    const float* xp = x.flat<float>().data();
    const float* sp = scale.flat<float>().data();
    float* yp = y->flat<float>().data();
    const bool gaussian = gaussian_;
    const int64_t units = gaussian ? (n + 1) / 2 : n;   // pairs or draws
    const int64_t chunks = (units + kChunk - 1) / kChunk;
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t u0 = c * kChunk;
        const int64_t nu = std::min(kChunk, units - u0);
        if (gaussian) {
          GaussianChunk(base, u0, nu, n, xp, sp, nscale, yp);
        } else {
          LaplaceChunk(base, u0, nu, xp, sp, nscale, yp);
        }
      }
    };
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, chunks, 20000, work);
  }

 private:
  bool gaussian_ = true;
};

}  // namespace

REGISTER_OP("TfdpNoisyAdd")
    .Input("x: float")
    .Input("scale: float")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Attr("distribution: {'gaussian', 'laplace'}")
    .Output("y: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("TfdpNoisyAdd").Device(tensorflow::DEVICE_CPU), TfdpNoisyAddOp);
