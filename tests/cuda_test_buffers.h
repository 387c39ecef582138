// Device buffers for the CUDA tests: uploads, NaN-poisoned outputs (0xFF bytes), downloads; freed at scope exit.
// CK(call): the CUDA runtime call must succeed (gtest assertion).
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#define CK(x) ASSERT_EQ((x), cudaSuccess) << #x

namespace lily::testcuda {

struct Dev {
  std::vector<void*> p;
  Dev() = default;
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() {
    for (void* q : p) cudaFree(q);
  }
  template <class T>
  T* up(const std::vector<T>& v) {
    void* d = nullptr;
    if (cudaMalloc(&d, std::max<size_t>(v.size(), 4) * sizeof(T)) != cudaSuccess) return nullptr;
    cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    p.push_back(d);
    return static_cast<T*>(d);
  }
  template <class T = float>
  T* poisoned(size_t n) {
    void* d = nullptr;
    if (cudaMalloc(&d, std::max<size_t>(n, 4) * sizeof(T)) != cudaSuccess) return nullptr;
    cudaMemset(d, 0xFF, n * sizeof(T));
    p.push_back(d);
    return static_cast<T*>(d);
  }
};

template <class T>
std::vector<T> down(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

}  // namespace lily::testcuda
