#include "cli/mtp_args.h"

#include <cstdio>

#include "core/error.h"

namespace lily {

std::vector<std::string> mtp_flags() { return {"mtp", "mtp-from"}; }

MtpChoice load_mtp_for(const Args& a, ModelWeights& w) {
  MtpChoice c;
  const std::string v = a.get("mtp", "");
  if (v == "off") {
    if (a.has("mtp-from")) throw Error("--mtp-from DIR with --mtp off: give one or the other");
    return c;
  }
  if (!v.empty()) {
    c.asked = true;
    const long k = a.get_int("mtp", kDefaultMtpDrafts);
    if (k < 1 || k > 8) throw Error("--mtp: expected a draft count from 1 to 8 or 'off', got '" + v + "'");
    c.k = static_cast<int>(k);
  } else {
    c.k = kDefaultMtpDrafts;
  }
  if (a.has("mtp-from")) {
    load_mtp(w, a.get("mtp-from"));
  } else if (w.mtp) {
    // already made with the model (a synthetic model's random block)
  } else if (!w.mtp_tensors.empty()) {
    load_mtp(w);
  } else {
    if (c.asked)
      throw Error("--mtp " + v + ": the checkpoint has no multi-token-prediction weights (mtp.*); --mtp-from DIR reads "
                  "them from another checkpoint of the model (e.g. the official release)");
    c.k = 0;
  }
  return c;
}

int mtp_for_backend(const MtpChoice& c, const Backend& be, const char* cmd) {
  if (c.k > 0 && !c.asked && be.mtp_available() && !be.mtp_default_off_reason().empty()) {
    std::fprintf(stderr, "lily %s: speculative decoding off by default: %s\n", cmd, be.mtp_default_off_reason().c_str());
    return 0;
  }
  if (c.k == 0) return 0;
  if (be.mtp_available()) return c.asked ? c.k : be.mtp_default_drafts();
  if (c.asked) throw Error("--mtp " + std::to_string(c.k) + ": " + be.mtp_unavailable_reason());
  std::fprintf(stderr, "lily %s: speculative decoding off: %s\n", cmd, be.mtp_unavailable_reason().c_str());
  return 0;
}

}  // namespace lily
