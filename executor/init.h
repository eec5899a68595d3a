// Deterministic numbers from a seed: weight initialisation by GLOBAL parameter coordinates and the
// synthetic token data. Header-only and usable from CUDA kernels (functions are __host__ __device__
// under nvcc), so every backend and every sharding of a model starts from identical weights.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define HETSIM_HD __host__ __device__
#else
#define HETSIM_HD
#endif

namespace hetsim::executor {

// SplitMix64's finaliser (Steele et al. 2014): a bijective 64-bit mix.
HETSIM_HD inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

HETSIM_HD inline uint64_t HashKey(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  return Mix64(Mix64(Mix64(Mix64(seed) ^ a) ^ b) ^ c);
}

// A uniform double in (0, 1) from 53 bits of `h`.
HETSIM_HD inline double UniformOpen(uint64_t h) {
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// A standard normal deviate from a hash (Box–Muller).
HETSIM_HD inline double NormalFromHash(uint64_t h) {
  const double u1 = UniformOpen(h), u2 = UniformOpen(Mix64(h ^ 0x5851F42D4C957F2Dull));
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// The initial value of element (row, col) of parameter tensor `tensor_id` (layer · 16 + kind), in the
// tensor's global coordinates: N(0, std²), or 1 when std == 0 (norm weights).
HETSIM_HD inline float InitValue(uint64_t seed, uint64_t tensor_id, int64_t row, int64_t col, float std_dev) {
  if (std_dev == 0.0f) return 1.0f;
  return static_cast<float>(std_dev * NormalFromHash(HashKey(seed, tensor_id, static_cast<uint64_t>(row),
                                                             static_cast<uint64_t>(col))));
}

// Synthetic training data: token i of sequence `sequence` (numbered over the whole run: step · global
// batch + index in the batch). A sequence follows a fixed random "bigram" function next = f(prev) with
// probability 7/8 and is uniform otherwise, so a model can learn it and the loss goes down from
// ln(vocab). `out` receives length tokens.
inline void SyntheticSequence(uint64_t seed, uint64_t sequence, uint32_t length, uint32_t vocab, int32_t* out) {
  constexpr uint64_t kDataStream = 0xDA7Aull;
  for (uint32_t i = 0; i < length; ++i) {
    const uint64_t h = HashKey(seed, kDataStream, sequence, i);
    if (i == 0 || (h & 7u) == 0) {
      out[i] = static_cast<int32_t>((h >> 3) % vocab);
    } else {
      out[i] = static_cast<int32_t>(HashKey(seed, kDataStream + 1, static_cast<uint64_t>(out[i - 1]), 0) % vocab);
    }
  }
}

}  // namespace hetsim::executor
