#include "executor/runner_internal.h"

namespace hetsim::executor {
namespace {

// Every rank's `n` elements of `data` on rank 0 (MPI_Gatherv), ranks one after another; `offsets` gets where
// each rank's elements start there. Other ranks get nothing.
template <class T>
std::vector<T> GatherOnRoot(const T* data, int n, MPI_Datatype type, int world, bool root, std::vector<int>* offsets) {
  std::vector<int> counts(root ? world : 0);
  offsets->assign(root ? world : 0, 0);
  HETSIM_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::vector<T> all;
  if (root) {
    int total = 0;
    for (int r = 0; r < world; ++r) (*offsets)[static_cast<size_t>(r)] = total, total += counts[static_cast<size_t>(r)];
    all.resize(static_cast<size_t>(total));
  }
  HETSIM_MPI_CHECK(MPI_Gatherv(data, n, type, all.data(), counts.data(), offsets->data(), type, 0, MPI_COMM_WORLD));
  return all;
}

}  // namespace

void Runner::WriteOps() {
  // Rank r runs the r-th smallest device: rank order is the device order `hetsim lower` prints.
  const std::string mine = log_.Take();
  std::vector<int> offsets;
  const std::vector<char> all =
      GatherOnRoot(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, plan_.world_size(), root(), &offsets);
  if (!root()) return;
  const Status s = models::WriteFileAtomically(o_.ops_out, std::string(all.begin(), all.end()));
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
  } else {
    std::printf("executed operations of step 1 written to %s\n", o_.ops_out.c_str());
  }
}

GradientDump Runner::CollectGradients(double loss, double* disagreement, int* disagreeing_rank) {
  const auto& model = specs_.model;
  GradientDump dump;
  dump.loss = loss;
  std::vector<int64_t> offsets;
  std::map<std::pair<uint32_t, ParamKind>, size_t> index;  // (layer, kind) -> tensor
  int64_t total = 0;
  for (uint32_t l = 0; l < model.num_layers(); ++l) {
    for (const auto& spec : LayerParams(model, l, 1, 0)) {
      if (index.count({l, spec.kind})) continue;  // a routed expert tensor's other experts
      index[{l, spec.kind}] = offsets.size();
      offsets.push_back(total);
      total += spec.global_rows * spec.cols;
      dump.tensors.push_back({spec.name(), spec.global_rows, spec.cols, {}});
    }
  }
  // The canonical holder of each layer contributes its shards; every rank then gets the sum.
  std::vector<float> global(static_cast<size_t>(total), 0.0f);
  std::vector<std::vector<float>> mine;
  for (const auto& p : model_->params()) {
    mine.emplace_back(static_cast<size_t>(p.grad.t().numel()));
    be_->Download(mine.back().data(), p.grad.t());
    const auto& holder = plan_.canonical_holder.at(p.spec.layer);
    // A routed expert's canonical copy is expert-DP rank 0's of the holder stage (the EP ranks there hold the
    // experts between them); the rest is the holder replica's.
    const bool canonical = p.spec.expert ? holder[0] == role_.pipeline && holder[1] == role_.stage && role_.edp_rank == 0
                                         : holder[0] == role_.pipeline && holder[1] == role_.stage &&
                                               holder[2] == role_.replica && role_.shard == 0;
    if (!canonical) continue;
    const int64_t cols = p.spec.cols, first = p.spec.owned.begin - p.spec.held.begin;
    std::copy_n(mine.back().begin() + first * cols, p.spec.owned.size() * cols,
                global.begin() + offsets[index.at({p.spec.layer, p.spec.kind})] + p.spec.owned.begin * cols);
  }
  constexpr int64_t kChunk = int64_t{1} << 28;
  for (int64_t off = 0; off < total; off += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, total - off));
    HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, global.data() + off, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
  // Every replica and every TP rank must hold the same synchronised gradient in all the rows it holds
  // (this checks the gradient sync, including the completion of replicated rows, not just the shards).
  struct {
    double value;
    int rank;
  } worst{0.0, rank_};
  for (size_t i = 0; i < mine.size(); ++i) {
    const ParamSpec& spec = model_->params()[i].spec;
    const float* ref = global.data() + offsets[index.at({spec.layer, spec.kind})] + spec.held.begin * spec.cols;
    double d2 = 0, r2 = 0;
    for (size_t k = 0; k < mine[i].size(); ++k) {
      d2 += std::pow(double(mine[i][k]) - ref[k], 2);
      r2 += double(ref[k]) * ref[k];
    }
    const double rel = d2 == 0 ? 0.0 : (r2 > 0 ? std::sqrt(d2 / r2) : INFINITY);
    worst.value = std::max(worst.value, rel);
  }
  HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
  *disagreement = worst.value;
  *disagreeing_rank = worst.rank;
  if (root()) {
    for (size_t i = 0; i < dump.tensors.size(); ++i) {
      auto& t = dump.tensors[i];
      t.data.assign(global.begin() + offsets[i], global.begin() + offsets[i] + t.rows * t.cols);
    }
  }
  return dump;
}

int Runner::CheckGradients(double loss) {
  sync_->GatherGradientsForCheck();
  double disagreement = 0;
  int disagreeing_rank = 0;
  GradientDump dump = CollectGradients(loss, &disagreement, &disagreeing_rank);
  int status = 0;
  if (root()) {
    const bool agree = disagreement <= o_.rtol;
    std::printf("replicas agree: every rank's gradients match the canonical copy within %.3e (worst: rank %d)%s\n",
                disagreement, disagreeing_rank, agree ? "" : ": MISMATCH");
    if (!agree) status = 1;
    if (!o_.dump_gradients.empty()) {
      const Status s = WriteGradientDump(o_.dump_gradients, dump);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        status = 1;
      } else {
        std::printf("gradients of step 1 written to %s\n", o_.dump_gradients.c_str());
      }
    }
    if (!o_.compare_gradients.empty()) {
      auto ref = ReadGradientDump(o_.compare_gradients);
      Result<DumpComparison> cmp = ref.ok() ? CompareGradientDumps(dump, *ref) : Result<DumpComparison>(ref.status());
      if (!cmp.ok()) {
        std::fprintf(stderr, "hetsim-exec: --compare-gradients: %s\n", cmp.status().message().c_str());
        status = 1;
      } else {
        const auto* w = cmp->worst();
        const bool ok = cmp->Within(o_.rtol);
        std::printf("gradients vs %s: %zu tensors, worst %s relative L2 error %.3e (max abs %.3e), loss relative "
                    "error %.3e; tolerance %.1e: %s\n",
                    o_.compare_gradients.c_str(), cmp->tensors.size(), w ? w->name.c_str() : "-",
                    w ? w->relative_l2 : 0.0, w ? w->max_abs : 0.0, cmp->loss_relative, o_.rtol,
                    ok ? "MATCH" : "MISMATCH");
        if (!ok) {
          for (const auto& t : cmp->tensors) {
            if (!(t.relative_l2 <= o_.rtol)) {
              std::printf("  %-24s relative L2 error %.3e (reference norm %.3e)\n", t.name.c_str(), t.relative_l2,
                          t.ref_norm);
            }
          }
          status = 1;
        }
      }
    }
  }
  HETSIM_MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD));
  return status;
}

void Runner::Report(const DeviceTiming& mine, double wall_s) {
  // Serialise this rank's timing: [iterations, peak, per iteration: seconds, n, (category, mb, b, e)·n].
  std::vector<double> buf = {double(mine.iteration_s.size()), mine.peak_memory_bytes};
  for (size_t i = 0; i < mine.iteration_s.size(); ++i) {
    buf.push_back(mine.iteration_s[i]);
    buf.push_back(double(mine.slices[i].size()));
    for (const auto& s : mine.slices[i]) {
      buf.insert(buf.end(), {double(static_cast<int>(s.category)), double(s.micro_batch), s.begin_s, s.end_s});
    }
  }
  const int world = plan_.world_size();
  std::vector<int> displs;
  const std::vector<double> all =
      GatherOnRoot(buf.data(), static_cast<int>(buf.size()), MPI_DOUBLE, world, root(), &displs);
  if (!root()) return;
  std::vector<DeviceTiming> devices(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const double* p = all.data() + displs[static_cast<size_t>(r)];
    DeviceTiming& d = devices[static_cast<size_t>(r)];
    d.rank = r;
    const auto iters = static_cast<size_t>(*p++);
    d.peak_memory_bytes = *p++;
    for (size_t i = 0; i < iters; ++i) {
      d.iteration_s.push_back(*p++);
      const auto ns = static_cast<size_t>(*p++);
      std::vector<TimedSlice> sl;
      for (size_t k = 0; k < ns; ++k, p += 4) {
        sl.push_back({static_cast<Category>(static_cast<int>(p[0])), static_cast<int32_t>(p[1]), p[2], p[3]});
      }
      d.slices.push_back(std::move(sl));
    }
  }
  ReportContext ctx{plan_, specs_.cluster, specs_.model, specs_.training, specs_.plan_name, wall_s};
  const proto::IterationReport report = BuildReport(ctx, devices);
  std::printf("iteration %.4f s (mean of %zu timed), %.0f tokens/s, MFU %.2f%%, bubble %.1f%%\n",
              report.iteration_time_s(), mine.iteration_s.size(), report.tokens_per_s(), 100 * report.mfu(),
              100 * report.bubble_fraction());
  if (!o_.report_out.empty()) {
    const Status s = models::WriteFileAtomically(o_.report_out, models::ReportJson(report));
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  }
  if (!o_.timeline_out.empty()) {
    const Status s = models::WriteFileAtomically(o_.timeline_out, BuildChromeTrace(ctx, devices));
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  }
}

void Runner::WriteProfile(const std::vector<std::vector<TimedSlice>>& layer_steps) {
  const auto layers = MeasureLayers(layer_steps, model_->activation_bytes(), role_.chunks.front().begin,
                                    role_.chunks.front().end, role_.num_micro_batches);
  const auto& model = specs_.model;
  std::printf("per-layer costs of rank 0 (TP %u, micro-batch %u x %u tokens):\n", role_.tp, role_.share.size(),
              plan_.seq_len);
  for (const auto& m : layers) {
    const double fwd = model.ForwardFlops(m.layer, role_.share.size(), plan_.seq_len) / role_.tp;
    const double bwd = model.BackwardFlops(m.layer, role_.share.size(), plan_.seq_len) / role_.tp;
    std::printf("  layer %3u %-11s forward %9.3f ms (%7.1f TFLOP/s)  backward %9.3f ms (%7.1f TFLOP/s)  optimizer "
                "%8.3f ms  activations %.3f GiB\n",
                m.layer,
                model.kind(m.layer) == models::LayerKind::kEmbedding   ? "embedding"
                : model.kind(m.layer) == models::LayerKind::kHead      ? "head"
                                                                        : "transformer",
                m.forward_s * 1e3, m.forward_s > 0 ? fwd / m.forward_s / 1e12 : 0.0, m.backward_s * 1e3,
                m.backward_s > 0 ? bwd / m.backward_s / 1e12 : 0.0, m.optimizer_s * 1e3,
                m.activation_bytes / (1024.0 * 1024.0 * 1024.0));
  }
  // Merge into an existing profile of the same GPU, model and sequence length (replacing equal keys).
  proto::Profile profile;
  const std::string gpu = specs_.cluster.device(role_.device).gpu->name;
  const std::string model_name = o_.profile_model.empty() ? model.name() : o_.profile_model;
  if (std::filesystem::exists(o_.profile_out)) {
    auto old = models::LoadProfile(o_.profile_out);
    if (!old.ok()) {
      std::fprintf(stderr, "hetsim-exec: --profile-out: %s\n", old.status().message().c_str());
      return;
    }
    if (old->gpu() != gpu || old->model() != model_name || old->seq_len() != plan_.seq_len) {
      std::fprintf(stderr, "hetsim-exec: --profile-out %s holds gpu %s, model %s, seq_len %u; this run is %s, %s, %u\n",
                   o_.profile_out.c_str(), old->gpu().c_str(), old->model().c_str(), old->seq_len(), gpu.c_str(),
                   model_name.c_str(), plan_.seq_len);
      return;
    }
    profile = *old;
  }
  profile.set_kind("profile");
  profile.set_gpu(gpu);
  profile.set_model(model_name);
  profile.set_seq_len(plan_.seq_len);
  profile.set_source("hetsim-exec (" + be_->name() + ", " + DTypeName(be_->act_dtype()) + "), measured");
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  profile.set_date(date);
  profile.set_command(command_line_);
  for (const auto& t : ProfileLayers(model, layers, role_.tp, role_.share.size())) {
    bool replaced = false;
    for (auto& old : *profile.mutable_layers()) {
      if (old.layer() == t.layer() && old.tp_degree() == t.tp_degree() &&
          old.micro_batch_size() == t.micro_batch_size()) {
        old = t;
        replaced = true;
      }
    }
    if (!replaced) *profile.add_layers() = t;
  }
  const Status s = models::WriteFileAtomically(o_.profile_out, models::MessageToYaml(profile));
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
  } else {
    std::printf("profile written to %s\n", o_.profile_out.c_str());
  }
}

}  // namespace hetsim::executor
