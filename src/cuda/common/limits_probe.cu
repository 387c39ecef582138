// Device limits for `lily bench --limits` on CUDA: sustained device-to-device copy bandwidth (bytes read +
// written) and the bf16 tensor-core matrix rate through cuBLAS on an 8192^3 product of random data.
#ifdef LILY_HAVE_CUBLAS
#include <cublas_v2.h>
#endif
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_factory.h"

namespace lily {

namespace {

#ifdef LILY_HAVE_CUBLAS
__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((float(h & 0xffff) / 65535.0f - 0.5f));
  }
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS ") + what + " failed (status " + std::to_string(int(s)) + ")");
}
#endif

}  // namespace

double cuda_copy_gbps(double seconds) {
  cudaEvent_t a, b;
  LILY_CUDA_CHECK(cudaEventCreate(&a));
  LILY_CUDA_CHECK(cudaEventCreate(&b));
  // 2 GiB buffers, best of several copies
  const size_t bytes = size_t(2) << 30;
  void *src = nullptr, *dst = nullptr;
  LILY_CUDA_CHECK(cudaMalloc(&src, bytes));
  LILY_CUDA_CHECK(cudaMalloc(&dst, bytes));
  LILY_CUDA_CHECK(cudaMemset(src, 1, bytes));
  float best = 1e30f;
  const auto t_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0; i < 3 || (std::chrono::steady_clock::now() < t_end && i < 50); ++i) {
    LILY_CUDA_CHECK(cudaEventRecord(a));
    LILY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    LILY_CUDA_CHECK(cudaEventRecord(b));
    LILY_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LILY_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i > 0) best = std::min(best, ms);  // the first copy is a warm-up
  }
  LILY_CUDA_CHECK(cudaFree(src));
  LILY_CUDA_CHECK(cudaFree(dst));
  LILY_CUDA_CHECK(cudaEventDestroy(a));
  LILY_CUDA_CHECK(cudaEventDestroy(b));
  return 2.0 * double(bytes) / (best * 1e-3) / 1e9;
}

CudaLimits cuda_probe_limits(double seconds) {
  CudaLimits out;
  cudaDeviceProp prop{};
  LILY_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  out.device = prop.name;
  out.copy_gbps = cuda_copy_gbps(seconds / 2);
#ifdef LILY_HAVE_CUBLAS
  // matrix rate: C = A·B, bf16 in, fp32 accumulate, random data
  const int n = 8192;
  __nv_bfloat16 *A = nullptr, *B = nullptr, *C = nullptr;
  LILY_CUDA_CHECK(cudaMalloc(&A, size_t(n) * n * 2));
  LILY_CUDA_CHECK(cudaMalloc(&B, size_t(n) * n * 2));
  LILY_CUDA_CHECK(cudaMalloc(&C, size_t(n) * n * 2));
  cudaEvent_t a, b;
  LILY_CUDA_CHECK(cudaEventCreate(&a));
  LILY_CUDA_CHECK(cudaEventCreate(&b));
  fill_random_bf16<<<1024, 256>>>(A, size_t(n) * n, 1u);
  fill_random_bf16<<<1024, 256>>>(B, size_t(n) * n, 2u);
  LILY_CUDA_CHECK(cudaGetLastError());
  cublasHandle_t h;
  check_cublas(cublasCreate(&h), "create");
  const float one = 1.0f, zero = 0.0f;
  float best = 1e30f;
  const auto t_end2 = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds / 2);
  for (int i = 0; i < 4 || (std::chrono::steady_clock::now() < t_end2 && i < 30); ++i) {
    LILY_CUDA_CHECK(cudaEventRecord(a));
    check_cublas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n,
                              &zero, C, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "GemmEx");
    LILY_CUDA_CHECK(cudaEventRecord(b));
    LILY_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LILY_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i > 0) best = std::min(best, ms);
  }
  out.matmul_tflops = 2.0 * double(n) * n * n / (best * 1e-3) / 1e12;
  cublasDestroy(h);
  LILY_CUDA_CHECK(cudaFree(A));
  LILY_CUDA_CHECK(cudaFree(B));
  LILY_CUDA_CHECK(cudaFree(C));
  LILY_CUDA_CHECK(cudaEventDestroy(a));
  LILY_CUDA_CHECK(cudaEventDestroy(b));
#endif  // without cuBLAS the matrix rate stays 0 (reported as not measured)
  return out;
}

}  // namespace lily
