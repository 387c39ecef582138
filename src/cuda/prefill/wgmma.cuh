// Hopper warpgroup MMA (wgmma, sm_90a only: include from code compiled for compute_90a and guard device bodies
// with __CUDA_ARCH_FEAT_SM90_ALL). Operands come from shared memory as K-major tiles of 64 16-bit elements per
// row (128 bytes) in the 128-byte swizzle: row r's 16-byte chunk c lives at r * 128 + ((c ^ (r % 8)) * 16) of a
// 1024-byte aligned tile; 8 rows make a 1024-byte atom. The matrix descriptor: start address >> 4 (bits 0-13),
// leading byte offset >> 4 (16-29, unused for swizzled K-major), stride byte offset >> 4 (32-45: 1024, the step
// between 8-row atoms), layout 1 = 128-byte swizzle (62-63). A k16 step inside the 64-wide tile adds 32 bytes to the
// start address (the swizzle is applied to the absolute address bits, hence the 1024-byte alignment).
// Accumulators of m64nNk16 (f32): thread t of the warpgroup, warp w = t / 32, lane l: d[4j + 0, 1] are row
// 16w + l / 4, columns 8j + 2 (l % 4) + {0, 1}; d[4j + 2, 3] the same columns of row 16w + l / 4 + 8.
#pragma once
#include <cstdint>

namespace lily::cuda {

__device__ __forceinline__ uint64_t wg_desc(uint32_t smem_byte_addr) {
  return uint64_t((smem_byte_addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
// byte offset of 16-byte chunk c (0..7) of row r in a swizzled tile
__device__ __forceinline__ uint32_t sw128(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// generic-proxy shared-memory writes (st.shared, cp.async) made visible to the async proxy (wgmma)
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// keeps the compiler from moving accumulator reads / writes across a wgmma issue or wait
template <int N>
__device__ __forceinline__ void wg_reg_fence(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void st_shared_u4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void cp_async16_s(uint32_t addr, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(addr), "l"(src) : "memory");
}

// d (m64 x N, f32) += A (64 x 16, descriptor da) x B (N x 16, K-major, descriptor db); fp16 (_h) or bf16 (_bf)
// operands. Asynchronous: wg_commit then wg_wait before d is read.
// The accumulator lists of the two shapes (64 and 32 registers) as asm operand text and constraints.
#define LILY_WG_REGS64  \
  "{"  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"  \
  "}"
#define LILY_WG_REGS32  \
  "{"  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"  \
  "}"
#define LILY_WG_OUT64(d)  \
  "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]),  \
  "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]),  \
  "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]),  \
  "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]),  \
  "+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35]), "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39]),  \
  "+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]), "+f"((d)[43]), "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47]),  \
  "+f"((d)[48]), "+f"((d)[49]), "+f"((d)[50]), "+f"((d)[51]), "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55]),  \
  "+f"((d)[56]), "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59]), "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63])
#define LILY_WG_OUT32(d)  \
  "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]),  \
  "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]),  \
  "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]),  \
  "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31])
// one wgmma with scale-d = 1 (accumulate), both scales +1, no transposes; operands a, b: the A and B descriptors,
// one: a register holding 1 (the scale-d predicate)
#define LILY_WG_MMA(shape, type, regs, a, b, one)                                                                 \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " one ", 0;\nwgmma.mma_async.sync.aligned." shape ".f32." type "." type " " \
  regs ", " a ", " b ", p, 1, 1, 0, 0;\n}\n"

__device__ __forceinline__ void wgmma_n128_h(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(LILY_WG_MMA("m64n128k16", "f16", LILY_WG_REGS64, "%64", "%65", "%66")
               : LILY_WG_OUT64(d) : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_n128_bf(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(LILY_WG_MMA("m64n128k16", "bf16", LILY_WG_REGS64, "%64", "%65", "%66")
               : LILY_WG_OUT64(d) : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_n64_h(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(LILY_WG_MMA("m64n64k16", "f16", LILY_WG_REGS32, "%32", "%33", "%34")
               : LILY_WG_OUT32(d) : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_n64_bf(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(LILY_WG_MMA("m64n64k16", "bf16", LILY_WG_REGS32, "%32", "%33", "%34")
               : LILY_WG_OUT32(d) : "l"(da), "l"(db), "r"(1));
}

}  // namespace lily::cuda
