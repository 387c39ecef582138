// Counter-based random numbers: word i of stream `key` is a pure function of (key, i), so any slice of a
// tensor can be generated independently (in parallel) and the result never depends on the thread count.
#pragma once
#include <cstdint>
#include <string_view>

namespace lily {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Word i of the stream.
inline uint64_t rng_word(uint64_t key, uint64_t i) { return splitmix64(key ^ (i * 0xD1B54A32D192ED03ull)); }

// Uniform double in [0, 1) from word i.
inline double rng_unit(uint64_t key, uint64_t i) { return double(rng_word(key, i) >> 11) * 0x1.0p-53; }

// A stream key from a seed and a tensor name (FNV-1a of the name, mixed with the seed).
inline uint64_t rng_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return splitmix64(h ^ splitmix64(seed));
}

}  // namespace lily
