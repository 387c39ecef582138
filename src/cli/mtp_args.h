// --mtp K|off and --mtp-from DIR (lily serve, chat, bench): speculative decoding with the checkpoint's
// multi-token-prediction block. On by default (the backend's draft count) when the model has mtp.* tensors (or
// --mtp-from names a checkpoint that has them) and the backend runs the MTP block; the weights are loaded only then.
#pragma once
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/backend.h"
#include "model/weights.h"

namespace lily {

constexpr int kDefaultMtpDrafts = 3;  // MtpChoice::k when --mtp is not given (mtp_for_backend then takes the backend's)

struct MtpChoice {
  int k = 0;              // draft tokens per step (0: off)
  bool asked = false;     // --mtp K given explicitly
};

std::vector<std::string> mtp_flags();  // {"mtp", "mtp-from"}
// Parses --mtp and loads w's MTP block when it is on. Throws on a bad value, on --mtp K without MTP weights, on
// --mtp off with --mtp-from.
MtpChoice load_mtp_for(const Args& a, ModelWeights& w);
// The draft count to run on `be`: an explicit --mtp K on a backend without MTP throws with the reason; the default
// is the backend's (Backend::mtp_default_drafts) and turns itself off there, and where the backend says it should be
// off by default (Backend::mtp_default_off_reason), with a note on stderr ("lily CMD: ...").
int mtp_for_backend(const MtpChoice& c, const Backend& be, const char* cmd);

}  // namespace lily
