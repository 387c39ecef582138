// Gated DeltaNet over a chunk, the chunked (WY / UT-transform) form of the delta rule: prefill_gdn runs it instead
// of the sequential scan where prefill_gdn_uses_chunked (GdnChunkArgs::chunked; PrefillRunner sets it for chunks of
// >= kGdnTcMinN tokens where the device and precision allow it); conv, ring and norm stay in prefill_gdn.cu. The
// kernels are the tensor-core ones of prefill_gdn_chunked_tc.cu; ref::gdn_chunked (src/cpu/gdn_chunked.*) is their
// CPU oracle and derivation, the sequential scan (k_scan) their device reference.
#include <cstdint>

#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {

int gdn_smem_optin() {
  static const int v = [] {
    int dev = 0, x = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&x, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
    return x;
  }();
  return v;
}

size_t prefill_gdn_ws_floats(int n, int Hv, int Dk, int Dv) { return prefill_gdn_tc_ws_floats(n, Hv, Dk, Dv); }

bool prefill_gdn_uses_chunked(const GdnChunkArgs& g) {
  if (!g.chunked || !g.ws || g.n < g.chunked_min_n || g.Dk % 32 || g.Dk > 128) return false;
  return prefill_gdn_tc_supported(g);
}

void prefill_gdn_chunked_scan(const GdnChunkArgs& g, cudaStream_t s) { prefill_gdn_chunked_scan_tc(g, s); }

}  // namespace lily::cuda
