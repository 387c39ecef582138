#include "engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "engine/sample_math.h"
#include "engine/step_sampler.h"

namespace lily {
namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Uniform in [0, 1) from a counter-based stream (53 bits).
struct Uniform {
  uint64_t seed, counter = 0;
  double next() { return double(samp::philox64(seed, counter++) >> 11) * (1.0 / 9007199254740992.0); }
};

constexpr int kMinRoundsBeforeOff = 8;  // spec rounds measured before auto_off judges

}  // namespace

int32_t draw_index(const std::vector<double>& prob, double u) {
  double z = 0;
  for (double p : prob) z += p;
  const double target = u * z;
  double acc = 0;
  int32_t last = -1;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] <= 0) continue;
    acc += prob[i];
    last = int32_t(i);
    if (acc > target) return int32_t(i);
  }
  return last;  // rounding at the top end
}

int32_t spec_accept(const std::vector<double>& p, const std::vector<double>& q, int32_t d, double u, double u2) {
  const double pd = p[size_t(d)], qd = q[size_t(d)];
  if (qd > 0 && u * qd < pd) return -1;  // u < p/q (always when p >= q)
  std::vector<double> r(p.size());
  double z = 0;
  for (size_t i = 0; i < p.size(); ++i) z += (r[i] = std::max(0.0, p[i] - q[i]));
  return draw_index(z > 0 ? r : p, u2);
}

std::function<void(const float*, int, int)> mtp_prefill_hook(Backend& be, SeqState& st,
                                                             const std::vector<int32_t>& ids, MtpCarry& carry) {
  return [&be, &st, &ids, &carry](const float* h, int row0, int n) {
    const int H = be.config().hidden;
    const int total = static_cast<int>(ids.size());
    std::vector<float> rows(h, h + size_t(n) * size_t(H));  // the hook may reuse the backend's scratch
    const int last = row0 + n - 1;
    if (last == total - 1) {
      carry.hidden.assign(rows.end() - H, rows.end());
      carry.pos = last;
    }
    const int paired = std::min(n, total - 1 - row0);  // rows whose next token is known
    if (paired > 0) be.mtp_forward(st, ids.data() + row0 + 1, rows.data(), paired, row0, 0, nullptr, nullptr);
  };
}

int mtp_decode(Backend& be, SeqState& st, StepSampler& ss, int32_t first_id, int max_steps,
               const std::function<bool(int32_t)>& on_token, float* last_logits, const MtpCarry* carry,
               const MtpConfig& cfg, MtpStats* stats_out) {
  if (max_steps <= 0) return 0;
  if (cfg.k > 0 && !be.mtp_available()) throw Error(be.mtp_unavailable_reason());
  MtpStats local;
  MtpStats& stats = stats_out ? *stats_out : local;
  const int V = be.config().vocab, H = be.config().hidden;
  const int K = std::max(0, cfg.k);
  const bool greedy = ss.params().greedy;
  // greedy rows without penalties take the plain argmax: the backend returns ids, not logits
  const bool by_id = greedy && !ss.params().use_rep && !ss.params().use_pf && !last_logits;
  std::vector<float> logits(static_cast<size_t>(K + 1) * V), hid(static_cast<size_t>(K + 1) * H);
  std::vector<float> qlog(static_cast<size_t>(V)), chain(static_cast<size_t>(H)), pend_out;
  std::vector<std::vector<double>> q(static_cast<size_t>(K));
  std::vector<double> p;
  std::vector<int32_t> ids(static_cast<size_t>(K + 1)), vids(static_cast<size_t>(K + 1)), emitted;
  Uniform rng{cfg.seed ^ ss.params().seed};
  // Hidden rows of positions [st.pos - r, st.pos) whose MTP rows are not computed; pend_ids: the tokens after
  // them except the last row's (that is cur).
  std::vector<float> pend_h;
  std::vector<int32_t> pend_ids;
  if (carry && carry->pos == st.pos - 1 && static_cast<int>(carry->hidden.size()) == H) pend_h = carry->hidden;
  bool off = K == 0;
  int32_t cur = first_id;
  int produced = 0, consumed = 0;
  double spec_time = 0;
  int64_t spec_tokens = 0;
  for (;;) {
    const int remaining = max_steps - produced;
    // A plain step first when none has been timed yet (auto_off compares against it).
    const bool need_plain = cfg.auto_off && stats.plain_steps == 0;
    const int kk = (off || pend_h.empty() || need_plain) ? 0 : std::min(K, remaining - 1);
    const auto t0 = Clock::now();
    if (kk > 0) {
      const int r = static_cast<int>(pend_h.size()) / H;
      pend_ids.push_back(cur);
      pend_out.resize(size_t(r) * size_t(H));
      int32_t top = 0;  // by_id: the draft
      if (by_id) top = be.mtp_argmax(st, pend_ids.data(), pend_h.data(), r, st.pos - r, pend_out.data());
      else be.mtp_forward(st, pend_ids.data(), pend_h.data(), r, st.pos - r, 1, qlog.data(), pend_out.data());
      const int rows_keep = be.mtp_rows(st);
      std::copy(pend_out.end() - H, pend_out.end(), chain.begin());
      for (int j = 0; j < kk; ++j) {
        if (j > 0 && by_id) top = be.mtp_argmax(st, &ids[size_t(j)], chain.data(), 1, st.pos + j - 1, chain.data());
        else if (j > 0) be.mtp_forward(st, &ids[size_t(j)], chain.data(), 1, st.pos + j - 1, 1, qlog.data(), chain.data());
        int32_t d;
        if (by_id) {
          d = top;
        } else if (greedy) {
          d = ss.pick(qlog.data());
        } else {
          ss.distribution(qlog.data(), q[size_t(j)]);
          d = draw_index(q[size_t(j)], rng.next());
        }
        const size_t oi = size_t(produced + j);
        if (cfg.oracle && oi < cfg.oracle->size() && rng.next() < cfg.accept_p) {
          d = (*cfg.oracle)[oi];
          if (!greedy) {  // the draft now comes from a point mass
            std::fill(q[size_t(j)].begin(), q[size_t(j)].end(), 0.0);
            q[size_t(j)][size_t(d)] = 1.0;
          }
        }
        ids[size_t(j + 1)] = d;
      }
      be.mtp_truncate(st, rows_keep);
      stats.draft_s += secs(t0, Clock::now());
    } else if (!off && !pend_h.empty()) {  // a plain step: the pending rows still enter the MTP cache
      const int r = static_cast<int>(pend_h.size()) / H;
      pend_ids.push_back(cur);
      be.mtp_forward(st, pend_ids.data(), pend_h.data(), r, st.pos - r, 0, nullptr, nullptr);
      stats.draft_s += secs(t0, Clock::now());
    }
    ids[0] = cur;
    const int n = kk + 1;
    std::unique_ptr<VerifyUndo> undo = by_id ? be.verify_argmax(st, ids.data(), n, vids.data(), hid.data())
                                             : be.verify(st, ids.data(), n, logits.data(), hid.data());
    // Acceptance: `emitted` gets the accepted drafts, then the target's own token.
    emitted.clear();
    int a = 0;
    for (int i = 0; i <= kk; ++i) {
      const float* li = logits.data() + size_t(i) * size_t(V);
      if (greedy || i == kk) {
        const int32_t t = by_id ? vids[size_t(i)] : ss.pick(li);
        ss.record(t);
        emitted.push_back(t);
        if (i < kk && t == ids[size_t(i + 1)]) {
          ++a;
          continue;
        }
        break;
      }
      ss.distribution(li, p);
      const int32_t d = ids[size_t(i + 1)];
      const double u = rng.next(), u2 = rng.next();
      const int32_t t = spec_accept(p, q[size_t(i)], d, u, u2);
      ss.record(t < 0 ? d : t);
      emitted.push_back(t < 0 ? d : t);
      if (t >= 0) break;
      ++a;
    }
    // Emit; a stop inside the run keeps the state at the stopping token (consumed when it is a draft).
    int m = a + 1;
    bool stop = false, stop_at_draft = false;
    for (size_t e = 0; e < emitted.size(); ++e) {
      ++produced;
      if (!on_token(emitted[e])) {
        stop = true;
        stop_at_draft = static_cast<int>(e) < a;
        m = std::min(m, static_cast<int>(e) + 2);
        break;
      }
    }
    be.accept(st, *undo, m);
    consumed += m;
    const double dt = secs(t0, Clock::now());
    if (kk > 0) {
      stats.verify_s += dt;
      ++stats.rounds;
      stats.drafted += kk;
      stats.accepted += a;
      spec_time += dt;
      spec_tokens += a + 1;
    } else {
      stats.plain_s += dt;
      ++stats.plain_steps;
    }
    if (stop || produced >= max_steps) {
      // A stop at an accepted draft: that token was consumed, and row m-1's logits follow it.
      if (last_logits && stop_at_draft)
        std::memcpy(last_logits, logits.data() + size_t(m - 1) * size_t(V), size_t(V) * sizeof(float));
      break;
    }
    // Next round: the verified positions' hidden rows wait for their MTP rows.
    pend_h.assign(hid.begin(), hid.begin() + size_t(a + 1) * size_t(H));
    pend_ids.assign(emitted.begin(), emitted.begin() + a);
    cur = emitted.back();
    if (cfg.auto_off && !off && stats.rounds >= kMinRoundsBeforeOff && stats.plain_steps > 0) {
      const double plain_per_token = stats.plain_s / double(stats.plain_steps);
      if (spec_time / double(spec_tokens) > plain_per_token) {
        off = true;
        stats.switched_off = true;
      }
    }
    if (off) {  // the rest without drafts: the backend's own decode loop
      consumed += be.decode_sample(st, ss, cur, max_steps - produced, on_token, last_logits);
      break;
    }
  }
  return consumed;
}

}  // namespace lily
