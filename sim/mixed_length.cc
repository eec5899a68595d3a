#include "sim/mixed_length.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"

namespace hetsim::sim::mixed {
namespace {

constexpr uint32_t kDefaultGrid = 1024;
constexpr double kDefaultIntraStepBytes = 6;   // BF16 weights + FP32 accumulated gradients
constexpr double kDefaultAcrossStepBytes = 2;  // BF16 weights

// A lengths file holds at most this much text (about 30 million lengths).
constexpr uintmax_t kMaxLengthsFileBytes = 256ull << 20;
// The sequences drawn over every step: each is packed, bucketed or assigned once per system and step.
constexpr uint64_t kMaxSequences = 20'000'000;

std::string ReadText(const std::string& path, Status* st) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    *st = std::filesystem::exists(path, ec)
              ? Status::Invalid(path + ": not a regular file (a folder or a device); give a text file of lengths")
              : Status::IoError(path + ": no such file (check the path; it is relative to the config's folder)");
    return "";
  }
  if (const auto bytes = std::filesystem::file_size(path, ec); !ec && bytes > kMaxLengthsFileBytes) {
    *st = Status::Invalid(path + ": " + std::to_string(bytes >> 20) + " MiB, more than a lengths file may hold (" +
                          std::to_string(kMaxLengthsFileBytes >> 20) + " MiB); sample it down");
    return "";
  }
  std::ifstream in(path);
  if (!in) {
    *st = Status::IoError(path + ": cannot read the file (check the path)");
    return "";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string FolderOf(const std::string& file) {
  const size_t slash = file.find_last_of('/');
  return slash == std::string::npos ? "" : file.substr(0, slash + 1);
}

// A relative path in the config is relative to the config's folder.
std::string Resolve(const std::string& ref, const std::string& config_file) {
  if (ref.empty() || ref[0] == '/') return ref;
  return FolderOf(config_file) + ref;
}

// Bytes per parameter a switch moves (0 in the config = the default).
double Fill(const proto::SwitchCost& s, bool intra) {
  if (intra) return s.intra_step_bytes_per_param() > 0 ? s.intra_step_bytes_per_param() : kDefaultIntraStepBytes;
  return s.across_steps_bytes_per_param() > 0 ? s.across_steps_bytes_per_param() : kDefaultAcrossStepBytes;
}

// A uniform double in [0, 1) from 53 random bits (the same on every standard library).
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

// ---- config ------------------------------------------------------------------------------------------

Result<proto::MixedLengthConfig> ParseConfig(const std::string& text, const std::string& file) {
  HETSIM_RETURN_IF_ERROR(models::PrescanYaml(text, file));
  proto::MixedLengthConfig c;
  HETSIM_RETURN_IF_ERROR(models::ParseYaml(text, file, &c));
  ErrorList errors;
  auto err = [&](const std::string& path, const std::string& what) { errors.Add(file + ": " + path + ": " + what); };
  if (c.kind() != "mixed_length") {
    err("kind", "expected `mixed_length`, found `" + c.kind() + "` (a mixed-length config starts with `kind: mixed_length`)");
  }
  if (c.data().source_case() == proto::MixedLengthData::SOURCE_NOT_SET) {
    err("data", "give the sequence lengths: `lognormal: {median_tokens: …, sigma: …}` or `lengths_file: FILE`");
  }
  if (!c.fidelity().empty() && !ParseFidelity(c.fidelity()).ok()) {
    err("fidelity", "expected fast, balanced or full, found `" + c.fidelity() + "`");
  }
  std::set<std::string> names;
  for (int i = 0; i < c.systems_size(); ++i) {
    const auto& s = c.systems(i);
    const std::string at = "systems[" + std::to_string(i) + "]";
    if (!names.insert(s.name()).second) err(at + ".name", "`" + s.name() + "` is used twice; give each system its own name");
    switch (s.strategy_case()) {
      case proto::MixedLengthSystem::STRATEGY_NOT_SET:
        err(at, "give the system's strategy: `packed`, `intervals` or `heterogeneous`");
        break;
      case proto::MixedLengthSystem::kPacked:
        break;
      case proto::MixedLengthSystem::kIntervals: {
        const auto& iv = s.intervals().intervals();
        for (int j = 1; j < iv.size(); ++j) {
          if (iv[j].max_tokens() <= iv[j - 1].max_tokens()) {
            err(at + ".intervals.intervals[" + std::to_string(j) + "].max_tokens",
                "intervals must be in increasing max_tokens; " + std::to_string(iv[j].max_tokens()) + " follows " +
                    std::to_string(iv[j - 1].max_tokens()));
          }
        }
        if (!iv.empty() && iv[iv.size() - 1].max_tokens() < c.context_tokens()) {
          err(at + ".intervals.intervals[" + std::to_string(iv.size() - 1) + "].max_tokens",
              "the last interval must reach the context (" + std::to_string(c.context_tokens()) + " tokens), found " +
                  std::to_string(iv[iv.size() - 1].max_tokens()));
        }
        break;
      }
      case proto::MixedLengthSystem::kHeterogeneous: {
        const auto& st = s.heterogeneous().strategies();
        for (int j = 0; j < st.size(); ++j) {
          const std::string sp = at + ".heterogeneous.strategies[" + std::to_string(j) + "]";
          if (j > 0 && st[j].max_tokens() <= st[j - 1].max_tokens()) {
            err(sp + ".max_tokens", "strategies must be in increasing max_tokens; " + std::to_string(st[j].max_tokens()) +
                                        " follows " + std::to_string(st[j - 1].max_tokens()));
          }
          uint32_t longest = 0;
          for (uint32_t w : st[j].pipeline_max_tokens()) longest = std::max(longest, w);
          if (st[j].pipeline_max_tokens_size() > 0 && longest < std::min(st[j].max_tokens(), c.context_tokens())) {
            err(sp + ".pipeline_max_tokens", "no pipeline takes sequences of " + std::to_string(st[j].max_tokens()) +
                                                 " tokens; raise the longest pipeline's window to at least that");
          }
        }
        if (!st.empty() && st[st.size() - 1].max_tokens() < c.context_tokens()) {
          err(at + ".heterogeneous.strategies[" + std::to_string(st.size() - 1) + "].max_tokens",
              "the last strategy must reach the context (" + std::to_string(c.context_tokens()) + " tokens), found " +
                  std::to_string(st[st.size() - 1].max_tokens()));
        }
        break;
      }
    }
  }
  HETSIM_RETURN_IF_ERROR(errors.ToStatus());
  return c;
}

Result<proto::MixedLengthConfig> LoadConfig(const std::string& path) {
  Status st;
  const std::string text = ReadText(path, &st);
  if (!st.ok()) return st;
  return ParseConfig(text, path);
}

// ---- data --------------------------------------------------------------------------------------------

LengthSampler::LengthSampler(const proto::MixedLengthData& data, std::vector<uint32_t> file_lengths,
                             uint32_t max_tokens)
    : data_(data), file_lengths_(std::move(file_lengths)), max_tokens_(max_tokens), rng_(data.seed()) {}

uint32_t LengthSampler::Draw() {
  double len = 1;
  if (data_.has_lognormal()) {
    const auto& ln = data_.lognormal();
    // Box-Muller from two uniforms (u1 in (0, 1]): the same stream on every platform.
    const double u1 = 1.0 - Uniform(rng_), u2 = Uniform(rng_);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    len = std::round(ln.median_tokens() * std::exp(ln.sigma() * z));
    len = std::max(len, static_cast<double>(std::max<uint32_t>(ln.min_tokens(), 1)));
  } else if (!file_lengths_.empty()) {
    len = file_lengths_[static_cast<size_t>(Uniform(rng_) * static_cast<double>(file_lengths_.size()))];
  }
  if (max_tokens_ > 0) len = std::min(len, static_cast<double>(max_tokens_));
  return static_cast<uint32_t>(std::clamp(len, 1.0, 4294967295.0));
}

std::vector<uint32_t> LengthSampler::NextStep(uint64_t max_sequences) {
  std::vector<uint32_t> out;
  uint64_t left = data_.tokens_per_step();
  while (left > 0 && out.size() <= max_sequences) {
    const uint32_t l = static_cast<uint32_t>(std::min<uint64_t>(Draw(), left));
    out.push_back(l);
    left -= l;
  }
  return out;
}

Result<std::vector<uint32_t>> LoadLengthsFile(const std::string& path) {
  Status st;
  const std::string text = ReadText(path, &st);
  if (!st.ok()) return st;
  std::vector<uint32_t> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    const size_t e = line.find_last_not_of(" \t\r");
    const std::string word = line.substr(b, e - b + 1);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
    if (word.empty() || *end != '\0' || word[0] == '-' || v < 1 || v > 1048576) {
      return Status::Invalid(path + ":" + std::to_string(n) + ": expected a sequence length (an integer from 1 to " +
                             "1048576 tokens), found `" + word + "`");
    }
    out.push_back(static_cast<uint32_t>(v));
  }
  if (out.empty()) return Status::Invalid(path + ": no sequence lengths in the file (one integer per line)");
  return out;
}

std::vector<uint32_t> PackWindows(std::vector<uint32_t> lengths, uint32_t window_tokens) {
  std::sort(lengths.begin(), lengths.end(), std::greater<>());
  std::vector<uint32_t> windows;
  for (uint32_t l : lengths) {
    HETSIM_CHECK(l <= window_tokens, "PackWindows: a sequence longer than the window");
    bool placed = false;
    for (uint32_t& w : windows) {
      if (w + l <= window_tokens) {
        w += l;
        placed = true;
        break;
      }
    }
    if (!placed) windows.push_back(l);
  }
  return windows;
}

size_t IntervalOf(uint32_t length, const std::vector<uint32_t>& upper_bounds) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (length <= upper_bounds[i]) return i;
  }
  return upper_bounds.size();
}

// ---- balancer ----------------------------------------------------------------------------------------

double PipelineTime(const std::vector<uint32_t>& windows, const PipelineModel& model) {
  if (windows.empty()) return 0;
  double t = 0;
  uint32_t longest = 0;
  for (uint32_t w : windows) {
    t += model.per_window_s(w);
    longest = std::max(longest, w);
  }
  return t + (model.fill_drain_s ? model.fill_drain_s(longest) : 0.0);
}

Result<std::vector<PipelineLoad>> Balance(const std::vector<uint32_t>& lengths,
                                          const std::vector<PipelineModel>& pipelines) {
  std::vector<uint32_t> order(lengths);
  std::stable_sort(order.begin(), order.end(), std::greater<>());
  std::vector<PipelineLoad> loads(pipelines.size());
  for (uint32_t len : order) {
    int best = -1;
    double best_time = 0;
    std::vector<uint32_t> best_windows;
    for (size_t p = 0; p < pipelines.size(); ++p) {
      if (len > pipelines[p].window_tokens) continue;
      std::vector<uint32_t> w = loads[p].windows;
      auto fit = std::find_if(w.begin(), w.end(), [&](uint32_t f) { return f + len <= pipelines[p].window_tokens; });
      if (fit != w.end()) {
        *fit += len;
      } else {
        w.push_back(len);
      }
      const double t = PipelineTime(w, pipelines[p]);
      if (best < 0 || t < best_time) {
        best = static_cast<int>(p);
        best_time = t;
        best_windows = std::move(w);
      }
    }
    if (best < 0) {
      return Status::Invalid("a sequence of " + std::to_string(len) +
                             " tokens fits no pipeline's window (raise pipeline_max_tokens)");
    }
    loads[best].sequences.push_back(len);
    loads[best].windows = std::move(best_windows);
    loads[best].time_s = best_time;
  }
  return loads;
}

// ---- simulations -------------------------------------------------------------------------------------

Simulations::Simulations(const models::Cluster& cluster, const models::TransformerModel& model, SimOptions options,
                         uint32_t grid_tokens)
    : cluster_(cluster), model_(model), options_(std::move(options)), grid_(std::max<uint32_t>(grid_tokens, 1)) {
  options_.record_timeline = true;  // the compute phase's end comes from the slices
}

int Simulations::AddPlan(const proto::Plan& plan, const std::string& file) {
  PlanEntry e{plan, file, {}};
  for (const auto& pipe : plan.pipelines()) {
    // Pipelines with the same stages (degrees, layers, width, nodes spanned) cost the same alone.
    std::ostringstream s;
    s << pipe.micro_batch_size();
    for (const auto& st : pipe.stages()) {
      std::set<uint32_t> nodes;
      for (uint32_t d : st.devices()) nodes.insert(d < cluster_.num_devices() ? cluster_.device(d).node : d);
      s << "|" << st.devices_size() << "," << models::TpDegree(st) << "," << models::CpDegree(st) << ","
        << models::UlyssesDegree(st) << "," << st.layer_begin() << "-" << st.layer_end() << "," << nodes.size();
    }
    e.pipeline_shape.push_back(s.str());
  }
  plans_.push_back(std::move(e));
  return static_cast<int>(plans_.size()) - 1;
}

uint32_t Simulations::Grid(uint32_t tokens) const {
  uint64_t g = (static_cast<uint64_t>(std::max<uint32_t>(tokens, 1)) + grid_ - 1) / grid_ * grid_;
  // Never round past the model's context (a window of exactly max_seq_len stays simulable).
  if (model_.spec().max_seq_len() > 0) g = std::min<uint64_t>(g, std::max(model_.spec().max_seq_len(), tokens));
  return static_cast<uint32_t>(g);
}

Result<SimPoint> Simulations::Run(int plan_id, const std::vector<int>& pipelines, uint32_t seq_len,
                                  const std::vector<uint32_t>& micro_batches) {
  const PlanEntry& e = plans_[plan_id];
  std::ostringstream key;
  key << plan_id << "@" << seq_len << ":";
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    key << (pipelines.empty() ? static_cast<int>(i) : pipelines[i]) << "x" << micro_batches[i] << ",";
  }
  if (auto it = cache_.find(key.str()); it != cache_.end()) return it->second;

  proto::Plan p = e.plan;
  p.clear_pipelines();
  uint64_t batch = 0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const int src = pipelines.empty() ? static_cast<int>(i) : pipelines[i];
    auto* pipe = p.add_pipelines();
    *pipe = e.plan.pipelines(src);
    pipe->set_num_micro_batches(micro_batches[i]);
    batch += static_cast<uint64_t>(pipe->micro_batch_size()) * micro_batches[i];
  }
  proto::Training t = e.plan.training();
  t.set_seq_len(seq_len);
  t.set_global_batch_size(static_cast<uint32_t>(batch));
  HETSIM_ASSIGN_OR_RETURN(proto::Training training, models::ResolveTraining(t, model_, e.file));
  models::PlanContext ctx{cluster_, model_, training};
  HETSIM_RETURN_IF_ERROR(models::ValidatePlanStructure(p, ctx, e.file));
  if (on_simulation) on_simulation(key.str());
  auto res = SimulateIteration(p, ctx, options_);
  if (!res.ok()) return res.status().WithPrefix(e.file + " at " + std::to_string(seq_len) + " tokens: ");
  ++sims_run_;
  SimPoint pt;
  pt.iteration_s = res->report.iteration_time_s();
  pt.oom = res->report.any_oom();
  for (const auto& slices : res->timeline) {
    for (const Slice& s : slices) {
      if (s.category == Category::kForward || s.category == Category::kBackward) {
        pt.compute_phase_s = std::max(pt.compute_phase_s, s.end_s);
      }
    }
  }
  // A pipeline simulated alone has no DP peers to shard ZeRO states with: its memory is checked on the
  // whole plan instead (DeltaPhi).
  if (pt.oom && pipelines.empty()) NoteOom(e.file + " at " + std::to_string(seq_len) + " tokens");
  cache_[key.str()] = pt;
  return pt;
}

Result<std::pair<double, double>> Simulations::DeltaPhi(int plan_id, int pipeline, uint32_t fill) {
  const uint32_t len = Grid(fill);
  const std::string key = std::to_string(plan_id) + "/" + plans_[plan_id].pipeline_shape[pipeline] + "@" +
                          std::to_string(len);
  if (auto it = delta_phi_.find(key); it != delta_phi_.end()) return it->second;
  {
    // Memory of the pipeline's devices with every pipeline of the plan at this length (ZeRO shards as in
    // the real plan), two micro-batches in flight at most.
    const PlanEntry& e = plans_[plan_id];
    proto::Plan p = e.plan;
    uint32_t batch = 0;
    for (auto& pipe : *p.mutable_pipelines()) {
      pipe.set_num_micro_batches(2);
      batch += 2 * pipe.micro_batch_size();
    }
    proto::Training t = e.plan.training();
    t.set_seq_len(len);
    t.set_global_batch_size(batch);
    HETSIM_ASSIGN_OR_RETURN(proto::Training training, models::ResolveTraining(t, model_, e.file));
    models::PlanContext ctx{cluster_, model_, training};
    HETSIM_RETURN_IF_ERROR(models::ValidatePlanStructure(p, ctx, e.file));
    for (const auto& m : models::EstimateMemory(p, ctx)) {
      if (m.pipeline == static_cast<uint32_t>(pipeline) && m.oom()) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), " (%.1f of %.0f GiB)", m.total_gib, m.capacity_gib);
        NoteOom(e.file + " pipeline " + std::to_string(pipeline) + " at " + std::to_string(len) + " tokens" + buf);
        break;
      }
    }
  }
  HETSIM_ASSIGN_OR_RETURN(SimPoint one, Run(plan_id, {pipeline}, len, {1}));
  HETSIM_ASSIGN_OR_RETURN(SimPoint two, Run(plan_id, {pipeline}, len, {2}));
  const double delta = two.compute_phase_s - one.compute_phase_s;
  const std::pair<double, double> dp{delta, std::max(0.0, one.compute_phase_s - delta)};
  delta_phi_[key] = dp;
  return dp;
}

Result<double> Simulations::PerWindow(int plan, int pipeline, uint32_t fill) {
  HETSIM_ASSIGN_OR_RETURN(auto dp, DeltaPhi(plan, pipeline, fill));
  return dp.first;
}

Result<double> Simulations::FillDrain(int plan, int pipeline, uint32_t fill) {
  HETSIM_ASSIGN_OR_RETURN(auto dp, DeltaPhi(plan, pipeline, fill));
  return dp.second;
}

Result<double> Simulations::Tail(int plan_id) {
  const std::vector<uint32_t> ones(plans_[plan_id].plan.pipelines_size(), 1);
  HETSIM_ASSIGN_OR_RETURN(SimPoint pt, Run(plan_id, {}, grid_, ones));
  return std::max(0.0, pt.iteration_s - pt.compute_phase_s);
}

// ---- switching ---------------------------------------------------------------------------------------

namespace {

// One holder of a layer's parameters: TP rank k of t.
struct Holder {
  uint32_t device;
  uint32_t k, t;
};

// Per layer, the devices that hold a TP shard of it under `plan`.
std::vector<std::vector<Holder>> Holders(const proto::Plan& plan, uint32_t num_layers) {
  std::vector<std::vector<Holder>> out(num_layers);
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      const uint32_t t = models::TpDegree(st), dp = models::DpDegree(st);
      const uint32_t shards = models::CpDegree(st) * models::UlyssesDegree(st);
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < num_layers; ++l) {
        for (uint32_t r = 0; r < dp; ++r) {
          for (uint32_t j = 0; j < shards; ++j) {
            for (uint32_t k = 0; k < t; ++k) out[l].push_back({models::StageDevice(st, r, j, k), k, t});
          }
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Transfer> SwitchTransfers(const proto::Plan& from, const proto::Plan& to,
                                      const models::TransformerModel& model, const models::Cluster& cluster,
                                      double bytes_per_param, proto::SwitchCost::Sources sources) {
  const uint32_t layers = model.num_layers();
  const auto old_h = Holders(from, layers), new_h = Holders(to, layers);
  std::map<std::pair<uint32_t, uint32_t>, double> bytes;  // (from, to) -> bytes
  std::map<uint32_t, double> sent;
  auto node = [&](uint32_t d) { return d < cluster.num_devices() ? cluster.device(d).node : d; };
  for (uint32_t l = 0; l < layers; ++l) {
    // Cut the layer into D equal chunks, D the lcm of every TP degree involved: each shard is whole chunks.
    uint32_t d_chunks = 1;
    for (const auto* hs : {&old_h[l], &new_h[l]}) {
      for (const Holder& h : *hs) d_chunks = std::lcm(d_chunks, h.t);
    }
    const double chunk_bytes = model.Params(l) * bytes_per_param / d_chunks;
    std::map<uint32_t, std::pair<uint32_t, uint32_t>> held;  // device -> [chunk begin, end) under `from`
    std::vector<std::vector<uint32_t>> holders_of(d_chunks);
    for (const Holder& h : old_h[l]) {
      const uint32_t b = h.k * (d_chunks / h.t), e = b + d_chunks / h.t;
      held[h.device] = {b, e};
      for (uint32_t c = b; c < e; ++c) holders_of[c].push_back(h.device);
    }
    for (const Holder& h : new_h[l]) {
      const uint32_t b = h.k * (d_chunks / h.t), e = b + d_chunks / h.t;
      const auto own = held.find(h.device);
      for (uint32_t c = b; c < e; ++c) {
        if (own != held.end() && c >= own->second.first && c < own->second.second) continue;
        const auto& cand = holders_of[c];
        if (cand.empty()) continue;
        uint32_t src = *std::min_element(cand.begin(), cand.end());
        if (sources != proto::SwitchCost::SOURCES_LOWEST_RANK) {
          // Hetu §4.3: a holder on the receiver's node (NVLink) first, then the least-loaded sender.
          bool src_local = false;
          double src_sent = 0;
          bool first = true;
          for (uint32_t s : cand) {
            const bool local = node(s) == node(h.device);
            const double load = sent[s];
            if (first || (local && !src_local) || (local == src_local && load < src_sent)) {
              src = s;
              src_local = local;
              src_sent = load;
              first = false;
            }
          }
        }
        bytes[{src, h.device}] += chunk_bytes;
        sent[src] += chunk_bytes;
      }
    }
  }
  std::vector<Transfer> out;
  for (const auto& [pair, b] : bytes) {
    Transfer t;
    t.from = {Endpoint::kGpu, pair.first};
    t.to = {Endpoint::kGpu, pair.second};
    t.bytes = b;
    out.push_back(t);
  }
  return out;
}

Result<double> SwitchSeconds(const proto::Plan& from, const proto::Plan& to, const models::TransformerModel& model,
                             const models::Cluster& cluster, double bytes_per_param,
                             proto::SwitchCost::Sources sources, const std::string& calibration) {
  const auto transfers = SwitchTransfers(from, to, model, cluster, bytes_per_param, sources);
  if (transfers.empty()) return 0.0;
  return SimulateTransfers(transfers, cluster, calibration);
}

// ---- the run -----------------------------------------------------------------------------------------

namespace {

struct Runner {
  const proto::MixedLengthConfig& config;
  const std::string& file;
  const models::Cluster& cluster;
  const models::TransformerModel& model;
  Simulations& sims;
  std::string calibration;
  std::map<std::string, int> plan_ids;
  std::map<std::tuple<int, int, double, int>, double> switch_cache;

  Result<int> Plan(const std::string& ref, const std::string& field) {
    const std::string path = Resolve(ref, file);
    if (auto it = plan_ids.find(path); it != plan_ids.end()) return it->second;
    auto plan = models::LoadPlan(path);
    if (!plan.ok()) return plan.status().WithPrefix(file + ": " + field + ": ");
    for (int i = 0; i < plan->pipelines_size(); ++i) {
      if (plan->pipelines(i).micro_batch_size() == 0) {
        return Status::Invalid(file + ": " + field + ": " + path + ": pipelines[" + std::to_string(i) +
                               "].micro_batch_size must be set");
      }
    }
    const int id = sims.AddPlan(*plan, path);
    plan_ids[path] = id;
    return id;
  }

  Result<double> Switch(int from, int to, double bytes_per_param, proto::SwitchCost::Sources src) {
    if (from == to || from < 0) return 0.0;
    const auto key = std::make_tuple(from, to, bytes_per_param, static_cast<int>(src));
    if (auto it = switch_cache.find(key); it != switch_cache.end()) return it->second;
    HETSIM_ASSIGN_OR_RETURN(double s, SwitchSeconds(sims.plan(from), sims.plan(to), model, cluster, bytes_per_param,
                                                     src, calibration));
    switch_cache[key] = s;
    return s;
  }

  // The pipelines of `plan` as the balancer sees them, with windows `windows[i]` (or `window` for all).
  std::vector<PipelineModel> Models(int plan, uint32_t window, const std::vector<uint32_t>& windows, Status* st) {
    std::vector<PipelineModel> out;
    for (int i = 0; i < sims.plan(plan).pipelines_size(); ++i) {
      PipelineModel m;
      m.window_tokens = i < static_cast<int>(windows.size()) ? windows[i] : window;
      // A simulated cost of pipeline i; the first error is kept in *st (the balancer then sees 0).
      auto cost = [this, plan, i, st](Result<double> (Simulations::*of)(int, int, uint32_t)) {
        return [this, plan, i, st, of](uint32_t fill) {
          auto r = (sims.*of)(plan, i, fill);
          if (!r.ok()) {
            if (st->ok()) *st = r.status();
            return 0.0;
          }
          return *r;
        };
      };
      m.per_window_s = cost(&Simulations::PerWindow);
      m.fill_drain_s = cost(&Simulations::FillDrain);
      out.push_back(std::move(m));
    }
    return out;
  }
};

std::string Loads(const std::vector<PipelineLoad>& loads) {
  std::ostringstream s;
  for (size_t p = 0; p < loads.size(); ++p) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%sp%zu:%zu seq/%zu win/%.2fs", p ? " " : "", p, loads[p].sequences.size(),
                  loads[p].windows.size(), loads[p].time_s);
    s << buf;
  }
  return s.str();
}

}  // namespace

Result<RunResult> RunMixedLength(const proto::MixedLengthConfig& config, const std::string& file,
                                 const RunOptions& options) {
  HETSIM_ASSIGN_OR_RETURN(models::Cluster cluster, models::LoadCluster(models::ResolveRelative(config.cluster(), file)));
  HETSIM_ASSIGN_OR_RETURN(models::TransformerModel model, models::LoadModel(models::ResolveRelative(config.model(), file)));
  if (model.spec().max_seq_len() > 0 && config.context_tokens() > model.spec().max_seq_len()) {
    return Status::Invalid(file + ": context_tokens: " + std::to_string(config.context_tokens()) +
                           " is longer than the model's max_seq_len (" + std::to_string(model.spec().max_seq_len()) +
                           "); lower it or use a model with a longer context");
  }
  SimOptions so;
  HETSIM_ASSIGN_OR_RETURN(so.fidelity, ParseFidelity(config.fidelity().empty() ? "balanced" : config.fidelity()));
  const std::string calibration = config.calibration().empty() ? "default" : config.calibration();
  so.compute.calibration = calibration;
  Simulations sims(cluster, model, so, config.length_grid_tokens() > 0 ? config.length_grid_tokens() : kDefaultGrid);
  Runner run{config, file, cluster, model, sims, calibration, {}, {}};

  // The data: every system trains the same steps.
  std::vector<uint32_t> file_lengths;
  if (config.data().has_lengths_file()) {
    auto l = LoadLengthsFile(Resolve(config.data().lengths_file(), file));
    if (!l.ok()) return l.status().WithPrefix(file + ": data.lengths_file: ");
    file_lengths = std::move(*l);
  }
  LengthSampler sampler(config.data(), std::move(file_lengths), config.context_tokens());
  RunResult result;
  // Each sequence is at most the context long, so a step has at least tokens_per_step / context of them.
  const auto& data = config.data();
  const double at_least = static_cast<double>(data.steps()) *
                          std::ceil(static_cast<double>(data.tokens_per_step()) / config.context_tokens());
  const auto too_many = [&](double n, const char* how) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s: data.steps x data.tokens_per_step: %s %.3g sequences to draw, over the limit of %.3g; "
                  "fewer steps or tokens per step",
                  file.c_str(), how, n, static_cast<double>(kMaxSequences));
    return Status::Invalid(buf);
  };
  if (at_least > static_cast<double>(kMaxSequences)) return too_many(at_least, "at least");
  uint64_t drawn = 0;
  for (uint32_t s = 0; s < data.steps(); ++s) {
    result.step_lengths.push_back(sampler.NextStep(kMaxSequences - drawn));
    drawn += result.step_lengths.back().size();
    if (drawn > kMaxSequences) return too_many(static_cast<double>(drawn), "more than");
  }

  // Progress: a line at most every 3 s.
  auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  std::string where;
  sims.on_simulation = [&](const std::string&) {
    const auto now = std::chrono::steady_clock::now();
    if (options.progress && now - last > std::chrono::seconds(3)) {
      last = now;
      options.progress(where + ", " + std::to_string(sims.simulations()) + " simulations, " +
                       std::to_string(static_cast<int>(std::chrono::duration<double>(now - t0).count())) + " s");
    }
  };

  for (int si = 0; si < config.systems_size(); ++si) {
    const auto& sys = config.systems(si);
    const std::string at = "systems[" + std::to_string(si) + "]";
    int prev_plan = -1;  // the layout the previous step ended in
    for (uint32_t step = 0; step < result.step_lengths.size(); ++step) {
      where = sys.name() + " step " + std::to_string(step + 1) + "/" + std::to_string(result.step_lengths.size());
      sims.on_simulation(where);  // a progress line at most every 3 s, simulated or not
      const auto& lengths = result.step_lengths[step];
      StepRow row;
      row.step = static_cast<int>(step);
      row.system = sys.name();
      row.sequences = static_cast<uint32_t>(lengths.size());
      row.max_len = *std::max_element(lengths.begin(), lengths.end());
      Status st;
      if (sys.has_packed()) {
        HETSIM_ASSIGN_OR_RETURN(int plan, run.Plan(sys.packed().plan(), at + ".packed.plan"));
        const auto& p = sims.plan(plan);
        const uint32_t windows = static_cast<uint32_t>(PackWindows(lengths, config.context_tokens()).size());
        const uint32_t per_pass = p.pipelines_size() * p.pipelines(0).micro_batch_size();
        const uint32_t m = (windows + per_pass - 1) / per_pass;
        HETSIM_ASSIGN_OR_RETURN(SimPoint pt,
                                sims.Run(plan, {}, config.context_tokens(), std::vector<uint32_t>(p.pipelines_size(), m)));
        row.time_s = pt.iteration_s;
        row.compute_s = pt.compute_phase_s;
        row.sync_s = pt.iteration_s - pt.compute_phase_s;
        row.detail = std::to_string(windows) + " windows; " + std::to_string(m) + " micro-batches per pipeline";
      } else if (sys.has_intervals()) {
        const auto& iv = sys.intervals();
        std::vector<uint32_t> bounds;
        for (const auto& i : iv.intervals()) bounds.push_back(i.max_tokens());
        std::vector<std::vector<uint32_t>> buckets(bounds.size());
        for (uint32_t l : lengths) buckets[IntervalOf(l, bounds)].push_back(l);
        int cur = prev_plan;
        bool first = true;
        for (size_t b = 0; b < buckets.size(); ++b) {
          if (buckets[b].empty()) continue;
          const std::string field = at + ".intervals.intervals[" + std::to_string(b) + "].plan";
          HETSIM_ASSIGN_OR_RETURN(int plan, run.Plan(iv.intervals(b).plan(), field));
          HETSIM_ASSIGN_OR_RETURN(double sw, run.Switch(cur, plan, Fill(iv.switching(), !first), iv.switching().sources()));
          row.switch_s += sw;
          auto models = run.Models(plan, bounds[b], {}, &st);
          auto loads = Balance(buckets[b], models);
          if (!loads.ok()) return loads.status().WithPrefix(file + ": " + field + ": ");
          HETSIM_RETURN_IF_ERROR(st);
          double c = 0;
          for (const auto& l : *loads) c = std::max(c, l.time_s);
          row.compute_s += c;
          row.detail += (row.detail.empty() ? "" : "; ") + std::string("<=") + std::to_string(bounds[b]) + ": " +
                        std::to_string(buckets[b].size()) + " seq " + Loads(*loads);
          cur = plan;
          first = false;
        }
        HETSIM_ASSIGN_OR_RETURN(row.sync_s, sims.Tail(cur));
        prev_plan = cur;
      } else {
        const auto& het = sys.heterogeneous();
        size_t pick = 0;
        while (pick + 1 < static_cast<size_t>(het.strategies_size()) && row.max_len > het.strategies(pick).max_tokens()) {
          ++pick;
        }
        const auto& opt = het.strategies(pick);
        const std::string field = at + ".heterogeneous.strategies[" + std::to_string(pick) + "]";
        HETSIM_ASSIGN_OR_RETURN(int plan, run.Plan(opt.plan(), field + ".plan"));
        if (opt.pipeline_max_tokens_size() > 0 && opt.pipeline_max_tokens_size() != sims.plan(plan).pipelines_size()) {
          return Status::Invalid(file + ": " + field + ".pipeline_max_tokens: " +
                                 std::to_string(opt.pipeline_max_tokens_size()) + " entries for a plan with " +
                                 std::to_string(sims.plan(plan).pipelines_size()) +
                                 " pipelines; give one window per pipeline or none");
        }
        HETSIM_ASSIGN_OR_RETURN(row.switch_s, run.Switch(prev_plan, plan, Fill(het.switching(), false),
                                                         het.switching().sources()));
        std::vector<uint32_t> windows(opt.pipeline_max_tokens().begin(), opt.pipeline_max_tokens().end());
        auto models = run.Models(plan, std::min(opt.max_tokens(), config.context_tokens()), windows, &st);
        auto loads = Balance(lengths, models);
        if (!loads.ok()) return loads.status().WithPrefix(file + ": " + field + ": ");
        HETSIM_RETURN_IF_ERROR(st);
        Assignment a;
        a.step = static_cast<int>(step);
        a.system = sys.name();
        a.strategy = "max length <= " + std::to_string(opt.max_tokens()) + ": " + sims.plan(plan).name();
        for (size_t p = 0; p < loads->size(); ++p) {
          row.compute_s = std::max(row.compute_s, (*loads)[p].time_s);
          a.pipeline_time_s.push_back((*loads)[p].time_s);
          for (uint32_t l : (*loads)[p].sequences) {
            a.lengths.push_back(l);
            a.pipeline_of_sequence.push_back(static_cast<uint32_t>(p));
          }
        }
        result.assignments.push_back(std::move(a));
        HETSIM_ASSIGN_OR_RETURN(row.sync_s, sims.Tail(plan));
        row.detail = sims.plan(plan).name() + ": " + Loads(*loads);
        prev_plan = plan;
      }
      if (!sys.has_packed()) row.time_s = row.compute_s + row.sync_s + row.switch_s;
      result.rows.push_back(std::move(row));
    }
  }
  result.simulations = sims.simulations();
  result.oom_notes = sims.oom_notes();
  return result;
}

std::string RowsCsv(const RunResult& r) {
  std::ostringstream o;
  o << "step,system,time_s,compute_s,sync_s,switch_s,sequences,max_len,detail\n";
  for (const auto& row : r.rows) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%d,%s,%.6f,%.6f,%.6f,%.6f,%u,%u,", row.step, row.system.c_str(), row.time_s,
                  row.compute_s, row.sync_s, row.switch_s, row.sequences, row.max_len);
    o << buf << "\"" << row.detail << "\"\n";
  }
  return o.str();
}

std::string AssignmentsCsv(const RunResult& r) {
  std::ostringstream o;
  o << "step,system,strategy,sequence,length,pipeline,pipeline_time_s\n";
  for (const auto& a : r.assignments) {
    for (size_t i = 0; i < a.lengths.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.6f", a.pipeline_time_s[a.pipeline_of_sequence[i]]);
      o << a.step << "," << a.system << ",\"" << a.strategy << "\"," << i << "," << a.lengths[i] << ","
        << a.pipeline_of_sequence[i] << "," << buf << "\n";
    }
  }
  return o.str();
}

}  // namespace hetsim::sim::mixed
