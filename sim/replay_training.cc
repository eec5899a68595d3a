// The training timeline: segments at the current configuration's iteration time, checkpoints every k
// iterations, commits, rollbacks, and the segments of the report.
#include <algorithm>
#include <cmath>

#include "sim/replay_engine.h"

namespace hetsim::sim::replay_internal {

void Engine::AddSegment(double start, double end, const std::string& phase, const std::string& cause) {
  auto* s = report_.add_segments();
  s->set_start_s(start);
  s->set_end_s(end);
  s->set_phase(phase);
  s->set_cause(cause);
  s->set_gpus(cfg_ != nullptr ? cfg_->gpus : 0);
}

// Cuts the down phases at `t` (a new interruption): phases not started are dropped.
void Engine::TruncateDown(double t) {
  auto* segs = report_.mutable_segments();
  while (segs->size() > static_cast<int>(down_begin_) && segs->Get(segs->size() - 1).start_s() >= t) segs->RemoveLast();
  if (segs->size() > static_cast<int>(down_begin_)) {
    auto* last = segs->Mutable(segs->size() - 1);
    if (last->end_s() > t) last->set_end_s(t);
  }
  ++resume_generation_;  // the pending resume is stale
}

void Engine::RecordConfig(const Config& c) {
  if (config_index_.count(c.key) != 0) return;
  config_index_[c.key] = report_.configurations_size();
  auto* rc = report_.add_configurations();
  rc->set_gpus(c.gpus);
  rc->set_plan(PlanLabel(c.plan));
  rc->set_nodes(c.cluster->Summary());
  rc->set_iteration_s(c.iteration_s);
  rc->set_checkpoint_save_s(c.save_s);
  rc->set_checkpoint_load_s(c.load_s);
}

void Engine::StartTraining(double t) {
  mode_ = Mode::kTraining;
  RecordConfig(*cfg_);
  seg_start_ = t_ = t;
  T_ = cfg_->iteration_s * StragglerFactor();
  C_ = cfg_->save_s;
  k_ = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(interval_s_ / T_)));
  seg_iters_ = 0;
  seg_ckpts_ = 0;
  seg_ckpt_s_ = 0;
  force_save_ = false;
}

void Engine::Commit() {
  committed_ += u_;
  kept_s_ += uncommitted_s_;
  policy_->Committed(u_, uncommitted_s_);
  u_ = 0;
  uncommitted_s_ = 0;
}

// Runs iterations and checkpoints from t_ up to t1 (t_ is always at the end of a whole unit: an iteration
// or a checkpoint save). The iterations of a cycle advance in closed form, so the loop runs once per
// checkpoint: Run() refuses an interval that would make more than kMaxCheckpoints of them.
void Engine::AdvanceTraining(double t1) {
  for (;;) {
    if (u_ < k_ && !force_save_) {
      const double fit = std::floor((t1 - t_) / T_ + kEps);
      const uint64_t n = std::min<uint64_t>(k_ - u_, fit > 0 ? static_cast<uint64_t>(fit) : 0);
      t_ += static_cast<double>(n) * T_;
      u_ += n;
      seg_iters_ += n;
      uncommitted_s_ += static_cast<double>(n) * T_;
      if (u_ < k_) return;
    }
    if (t_ + C_ > t1 + kEps) return;
    t_ += C_;
    force_save_ = false;
    ++seg_ckpts_;
    seg_ckpt_s_ += C_;
    ckpt_total_s_ += C_;
    const double trained = uncommitted_s_;
    Commit();
    policy_->Saved(cfg_, trained);
  }
}

void Engine::CloseSegment(double t, uint64_t lost_iterations) {
  AddSegment(seg_start_, t, "train", "");
  auto* s = report_.mutable_segments(report_.segments_size() - 1);
  s->set_seconds_per_iteration(T_);
  s->set_iterations(seg_iters_);
  s->set_lost_iterations(lost_iterations);
  s->set_checkpoints(seg_ckpts_);
  s->set_checkpoint_time_s(seg_ckpt_s_);
  s->set_tokens_kept((static_cast<double>(seg_iters_) - static_cast<double>(lost_iterations)) * tokens_per_iteration_);
  auto* rc = report_.mutable_configurations(config_index_.at(cfg_->key));
  rc->set_seconds(rc->seconds() + (t - seg_start_));
}

// Closes the training segment at t: with a rollback the iterations since the last checkpoint are lost;
// without one (state kept by replicas, or the end of the run) they are kept and only the unit in progress is.
void Engine::EndTraining(double t, bool rollback, const std::string& cause) {
  AdvanceTraining(t);
  uint64_t lost_iterations = 0;
  double lost = t - t_;  // the unit in progress
  if (rollback) {
    lost += uncommitted_s_;
    lost_iterations = u_;
    u_ = 0;
    uncommitted_s_ = 0;
  } else {
    Commit();
  }
  lost_s_ += lost;
  if (lost > 0 && !cause.empty()) by_event_[cause] += lost;
  CloseSegment(t, lost_iterations);
  mode_ = Mode::kIdle;
}

void Engine::Split(double t) {
  AdvanceTraining(t);
  lost_s_ += t - t_;  // the unit in progress starts over at the new speed
  CloseSegment(t, 0);
  const bool force = force_save_;
  StartTraining(t);
  force_save_ = force;
}

// The rollback goes back further than the last checkpoint (Gemini: to the last remote one when every
// host-memory copy of some state is gone): what was committed since is lost too.
void Engine::RollBackFurther() {
  const recovery::Work w = policy_->RollBack();
  if (w.iterations == 0 && w.seconds == 0) return;
  committed_ -= w.iterations;
  kept_s_ -= w.seconds;
  lost_s_ += w.seconds;
  by_event_[down_cause_] += w.seconds;
}

}  // namespace hetsim::sim::replay_internal
