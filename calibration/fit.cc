#include "calibration/fit.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "models/cost.h"
#include "models/kernels.h"
#include "models/spec_io.h"

namespace hetsim::calibration {
namespace {

std::string Fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

// Four significant digits: what the measurements support, and a readable file.
double Round(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(std::fabs(v))));
  return std::round(v * scale) / scale;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Seconds of `k` at unit efficiency without fixed costs: waves of tiles (or FLOPs) at peak for GEMMs,
// bytes at the HBM bandwidth for memory kernels.
double IdealSeconds(const models::Kernel& k, const models::GpuSpec& gpu, proto::DType dtype) {
  models::KernelParams unit = models::KernelParamsFor(gpu);
  unit.gemm_efficiency = 1, unit.memory_efficiency = 1, unit.kernel_latency_s = 0;
  unit.by_dtype.clear();
  if (k.type == models::Kernel::Type::kGemm) unit.memory_efficiency = 1e12;  // compute term only
  return models::KernelGpuSeconds(k, gpu, unit, dtype);
}

}  // namespace

// Reads a CSV with a header line (after '#' comment lines) into rows of named cells.
Result<std::vector<std::map<std::string, std::string>>> ReadCsv(const std::string& path,
                                                                 const std::vector<std::string>& required) {
  std::ifstream in(path);
  if (!in) return Status::Invalid(path + ": cannot open");
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (header.empty()) {
      header = cells;
      for (const auto& r : required) {
        if (std::find(header.begin(), header.end(), r) == header.end()) {
          return Status::Invalid(path + ":" + std::to_string(n) + ": the header has no column '" + r +
                                 "' (is this the right benchmark's output?)");
        }
      }
      continue;
    }
    if (cells.size() != header.size()) {
      return Status::Invalid(path + ":" + std::to_string(n) + ": " + std::to_string(cells.size()) + " cells, the header has " +
                             std::to_string(header.size()));
    }
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < cells.size(); ++i) row[header[i]] = cells[i];
    row["#line"] = std::to_string(n);
    rows.push_back(std::move(row));
  }
  if (header.empty()) return Status::Invalid(path + ": empty (no header line)");
  return rows;
}

Result<double> CsvNumber(const std::map<std::string, std::string>& row, const std::string& key, const std::string& path) {
  const std::string& s = row.at(key);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return Status::Invalid(path + ":" + row.at("#line") + ": column " + key + ": '" + s + "' is not a number");
  }
  return v;
}


Result<std::vector<KernelRow>> ReadKernelBench(const std::string& path) {
  const std::vector<std::string> cols = {"kind", "name", "model", "tp", "micro_batch", "seq_len", "pass", "m", "n",
                                         "k", "batch", "bytes", "flops", "median_s", "min_s", "model_s"};
  HETSIM_ASSIGN_OR_RETURN(auto rows, ReadCsv(path, cols));
  std::vector<KernelRow> out;
  for (const auto& r : rows) {
    KernelRow k;
    k.kind = r.at("kind"), k.name = r.at("name"), k.model = r.at("model"), k.pass = r.at("pass");
    double* nums[] = {&k.tp, &k.micro_batch, &k.seq_len, &k.m, &k.n, &k.k, &k.batch, &k.bytes, &k.flops,
                      &k.median_s, &k.min_s, &k.model_s};
    for (size_t i = 0; i < 12; ++i) {
      static const char* keys[] = {"tp", "micro_batch", "seq_len", "m", "n", "k", "batch", "bytes", "flops",
                                   "median_s", "min_s", "model_s"};
      HETSIM_ASSIGN_OR_RETURN(*nums[i], CsvNumber(r, keys[i], path));
    }
    if (!(k.median_s > 0)) return Status::Invalid(path + ":" + r.at("#line") + ": median_s must be positive");
    out.push_back(std::move(k));
  }
  return out;
}

Result<std::vector<CommRow>> ReadCommBench(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(auto rows, ReadCsv(path, {"op", "group_size", "bytes", "median_s"}));
  std::vector<CommRow> out;
  for (const auto& r : rows) {
    CommRow c;
    c.op = r.at("op");
    if (c.op != "allreduce" && c.op != "p2p") {
      return Status::Invalid(path + ":" + r.at("#line") + ": op '" + c.op + "' (expected allreduce or p2p)");
    }
    HETSIM_ASSIGN_OR_RETURN(double g, CsvNumber(r, "group_size", path));
    HETSIM_ASSIGN_OR_RETURN(c.bytes, CsvNumber(r, "bytes", path));
    HETSIM_ASSIGN_OR_RETURN(c.median_s, CsvNumber(r, "median_s", path));
    if (g < 2 || g != std::floor(g)) return Status::Invalid(path + ":" + r.at("#line") + ": group_size must be an integer >= 2");
    if (!(c.median_s > 0) || !(c.bytes > 0)) {
      return Status::Invalid(path + ":" + r.at("#line") + ": bytes and median_s must be positive");
    }
    c.group_size = static_cast<int>(g);
    out.push_back(c);
  }
  return out;
}

LinearFit RobustFit(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  LinearFit fit;
  const auto n = static_cast<Eigen::Index>(y.size());
  const auto p = static_cast<Eigen::Index>(x.empty() ? 0 : x.front().size());
  fit.n = y.size();
  if (n == 0 || p == 0) return fit;
  // Relative error: divide each row by its y.
  Eigen::MatrixXd a(n, p);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < p; ++j) a(i, j) = x[static_cast<size_t>(i)][static_cast<size_t>(j)] / y[static_cast<size_t>(i)];
  }
  Eigen::VectorXd w = Eigen::VectorXd::Ones(n), c;
  for (int round = 0; round < 20; ++round) {
    const Eigen::VectorXd sw = w.cwiseSqrt();
    Eigen::VectorXd next = (sw.asDiagonal() * a).colPivHouseholderQr().solve(sw.asDiagonal() * b);
    const bool converged = c.size() == p && (next - c).norm() <= 1e-10 * next.norm();
    c = next;
    if (converged) break;
    const Eigen::VectorXd r = a * c - b;
    std::vector<double> abs_r(static_cast<size_t>(n));
    for (Eigen::Index i = 0; i < n; ++i) abs_r[static_cast<size_t>(i)] = std::abs(r(i));
    const double scale = std::max(1.4826 * Median(abs_r), 1e-6);  // MAD estimate of the residuals' spread
    const double t = 1.345 * scale;
    for (Eigen::Index i = 0; i < n; ++i) w(i) = std::abs(r(i)) <= t ? 1.0 : t / std::abs(r(i));
  }
  fit.coef.assign(c.data(), c.data() + c.size());
  const Eigen::VectorXd r = a * c - b;
  for (Eigen::Index i = 0; i < n; ++i) {
    fit.mape += std::abs(r(i)) / static_cast<double>(n);
    fit.bias += r(i) / static_cast<double>(n);
    fit.worst = std::max(fit.worst, std::abs(r(i)));
  }
  return fit;
}

Result<proto::KernelCalibration> FitCalibration(const models::GpuSpec& gpu, const std::vector<KernelRow>& kernels,
                                                const std::vector<CommRow>& comm, FitSummary* summary) {
  proto::KernelCalibration out;
  out.add_gpus(gpu.name);
  auto say = [&](const std::string& s) {
    if (summary != nullptr) summary->lines.push_back(s);
  };
  const bool cpu = models::KernelParamsFor(gpu).sm_count == 0;
  // The bench records the dtype in its header only; GEMMs are timed in the backend's activation dtype:
  // fp32 on CPU workers, bf16 on GPUs.
  const proto::DType dtype = cpu ? proto::DTYPE_FP32 : proto::DTYPE_BF16;

  if (!kernels.empty()) {
    // Launch floor and issue cost.
    double latency = -1, host = -1;
    for (const auto& r : kernels) {
      if (r.kind == "launch" && r.name == "scale-1") latency = r.median_s;
      if (r.kind == "launch" && r.name == "host-issue") host = r.median_s;
    }
    // Memory-bound kernels: bytes at HBM speed.
    std::vector<std::vector<double>> xm;
    std::vector<double> ym;
    for (const auto& r : kernels) {
      if (r.kind != "memory") continue;
      models::Kernel k;
      k.type = models::Kernel::Type::kMemory, k.bytes = r.bytes;
      xm.push_back({IdealSeconds(k, gpu, dtype), 1.0});
      ym.push_back(r.median_s);
    }
    if (xm.size() < 3) return Status::Invalid("kernel benchmark: fewer than 3 memory-kernel rows to fit");
    const LinearFit mem2 = RobustFit(xm, ym);
    if (latency < 0) latency = std::max(0.0, mem2.coef[1]);
    // With the latency fixed, one slope: (t − latency) = ideal / efficiency.
    // Rows whose ideal time is below `min_ideal` are left out: there fixed costs beyond the launch floor
    // (a small kernel's ramp-up) would pass for a low efficiency.
    auto slope_fit = [&](const std::vector<std::vector<double>>& x, const std::vector<double>& y, double min_ideal = 0) {
      std::vector<std::vector<double>> x1;
      std::vector<double> y1;
      for (size_t i = 0; i < y.size(); ++i) {
        if (y[i] - latency <= 0.05 * y[i] || x[i][0] < min_ideal) continue;  // all fixed cost: no slope
        x1.push_back({x[i][0]});
        y1.push_back(y[i] - latency);
      }
      return RobustFit(x1, y1);
    };
    // One slope per kernel kind (copy, add, norm, SwiGLU, Adam, ...), then their mean: each kind weighs
    // alike, as each runs about once per layer pass. (On GPUs the kinds agree within ~10%; on CPU workers
    // they differ 10x, as norms, SwiGLU and Adam are bound by arithmetic, not memory.)
    std::map<std::string, std::pair<std::vector<std::vector<double>>, std::vector<double>>> by_kind;
    for (size_t i = 0, j = 0; i < kernels.size(); ++i) {
      if (kernels[i].kind != "memory") continue;
      by_kind[kernels[i].name].first.push_back(xm[j]);
      by_kind[kernels[i].name].second.push_back(ym[j]);
      ++j;
    }
    double inverse_sum = 0;
    int kinds = 0;
    std::string per_kind;
    LinearFit mem;
    for (const auto& [kind, xy] : by_kind) {
      // Memory kernels: transfers of at least twice the launch floor (on an H100, >= ~30 MB).
      const LinearFit f = slope_fit(xy.first, xy.second, 2 * latency);
      if (f.coef.empty() || !(f.coef[0] > 0)) continue;
      inverse_sum += f.coef[0], ++kinds;
      per_kind += " " + kind + Fmt(" %.3f;", 1 / f.coef[0]);
      mem.mape += f.mape * static_cast<double>(f.n), mem.n += f.n;
    }
    if (kinds == 0) return Status::Invalid("kernel benchmark: the memory kernels' fit failed");
    mem.mape /= static_cast<double>(mem.n);
    mem.coef = {inverse_sum / kinds};
    // GEMMs.
    std::vector<std::vector<double>> xg;
    std::vector<double> yg;
    for (const auto& r : kernels) {
      if (r.kind != "gemm") continue;
      models::Kernel k;
      k.type = models::Kernel::Type::kGemm, k.m = r.m, k.n = r.n, k.k = r.k, k.batch = r.batch;
      xg.push_back({IdealSeconds(k, gpu, dtype), 1.0});
      yg.push_back(r.median_s);
    }
    if (xg.size() < 3) return Status::Invalid("kernel benchmark: fewer than 3 GEMM rows to fit");
    const LinearFit gemm2 = RobustFit(xg, yg);
    const LinearFit gemm = slope_fit(xg, yg);
    if (gemm.coef.empty() || !(gemm.coef[0] > 0)) return Status::Invalid("kernel benchmark: the GEMM fit failed");
    // An efficiency above 1 means the catalog's peak or bandwidth for the device is below what it reached
    // (the CPU worker's row is nominal; caches beat its bandwidth): kept (the schema allows up to 10), and said.
    double ge = 1 / gemm.coef[0], me = 1 / mem.coef[0];
    if (ge > 1 || me > 1) {
      say(Fmt("note: fitted efficiencies %.3f (GEMM) / %.3f (memory) exceed 1: the catalog's peak or bandwidth for "
              "this device is below what it reached",
              ge, me));
    }
    ge = std::min(ge, 10.0), me = std::min(me, 10.0);
    out.set_gemm_efficiency(Round(ge));
    out.set_memory_efficiency(Round(me));
    out.set_kernel_latency_us(Round(latency * 1e6));
    if (host >= 0) out.set_host_overhead_us(Round(host * 1e6));
    out.set_sm_count(static_cast<uint32_t>(models::KernelParamsFor(gpu).sm_count));
    say(Fmt("GEMM: %.0f shapes, efficiency %.4f (free intercept: %.4f, %.2f us)", static_cast<double>(gemm.n), ge,
            1 / gemm2.coef[0], gemm2.coef[1] * 1e6) +
        Fmt("; fit MAPE %.1f%%, worst %.0f%%, bias %+.1f%%", gemm.mape * 100, gemm.worst * 100, gemm.bias * 100));
    say(Fmt("memory: %.0f kernels, efficiency %.4f of %.0f GB/s", static_cast<double>(mem.n), me, gpu.hbm_bandwidth_gbyte_s) +
        " (mean over kinds of" + per_kind + Fmt(" one line over all: %.4f, %.2f us); fit MAPE within kinds %.1f%%",
                                                  1 / mem2.coef[0], mem2.coef[1] * 1e6, mem.mape * 100));
    say(Fmt("kernel latency %.2f us, host issue %.2f us per kernel", latency * 1e6, std::max(host, 0.0) * 1e6));
  }

  if (!comm.empty()) {
    // Point-to-point: t = latency + bytes / bandwidth.
    std::vector<std::vector<double>> xp;
    std::vector<double> yp;
    for (const auto& r : comm) {
      if (r.op == "p2p") xp.push_back({r.bytes, 1.0}), yp.push_back(r.median_s);
    }
    // Without point-to-point rows (e.g. published all-reduce curves) the link is the catalog's scale-up
    // link, and only the collectives' efficiency and latency are fitted.
    double bw = gpu.scale_up_bandwidth_gbyte_s > 0 ? gpu.scale_up_bandwidth_gbyte_s * 1e9 : gpu.pcie_bandwidth_gbyte_s * 1e9;
    if (xp.size() == 1) return Status::Invalid("communication benchmark: one point-to-point row; a line needs two sizes");
    if (xp.size() >= 2) {
      const LinearFit p2p = RobustFit(xp, yp);
      if (!(p2p.coef[0] > 0)) return Status::Invalid("communication benchmark: the point-to-point fit has no bandwidth");
      bw = 1 / p2p.coef[0];
      const double lat = std::max(0.0, p2p.coef[1]);
      out.set_link_bandwidth_gbyte_s(Round(bw / 1e9));
      out.set_link_latency_us(Round(lat * 1e6));
      say(Fmt("link: %.2f GB/s, %.2f us (point-to-point, %.0f sizes, fit MAPE %.1f%%)", bw / 1e9, lat * 1e6,
              static_cast<double>(p2p.n), p2p.mape * 100));
    } else {
      say(Fmt("link: no point-to-point rows; the catalog's %.0f GB/s", bw / 1e9));
    }
    if (!(bw > 0)) return Status::Invalid("communication benchmark: no link bandwidth to relate the all-reduces to");
    // All-reduce per group size: t = α(g) + 2(g−1)/g · bytes / (bw · efficiency); one efficiency over all
    // sizes (the largest messages dominate it), then α(g) per size.
    std::map<int, std::pair<std::vector<std::vector<double>>, std::vector<double>>> by_size;
    for (const auto& r : comm) {
      if (r.op != "allreduce") continue;
      by_size[r.group_size].first.push_back({2.0 * (r.group_size - 1) / r.group_size * r.bytes / bw, 1.0});
      by_size[r.group_size].second.push_back(r.median_s);
    }
    if (!by_size.empty()) {
      std::vector<double> inverse_eff;
      std::vector<std::pair<int, LinearFit>> fits;
      for (const auto& [g, xy] : by_size) {
        if (xy.second.size() < 2) continue;
        LinearFit f = RobustFit(xy.first, xy.second);
        if (f.coef[0] > 0) inverse_eff.push_back(f.coef[0]);
        fits.emplace_back(g, std::move(f));
      }
      if (inverse_eff.empty()) return Status::Invalid("communication benchmark: the all-reduce fit has no bandwidth");
      const double eff = std::clamp(1 / Median(inverse_eff), 1e-3, 10.0);
      out.set_collective_efficiency(Round(eff));
      // Group sizes whose bus bandwidths differ by more than 2% (NCCL's ring over 2 GPUs of an NVSwitch node
      // reaches less of NVLink than over 8) do not share one efficiency: then each size keeps its own line,
      // latency and bus bandwidth (collective_latency[].bus_bandwidth_gbyte_s), and the efficiency stays as
      // the median for the sizes the data does not hold.
      const auto [lo, hi] = std::minmax_element(inverse_eff.begin(), inverse_eff.end());
      if (fits.size() >= 2 && *hi > 1.02 * *lo) {
        std::string lines;
        for (const auto& [g, f] : fits) {
          if (!(f.coef[0] > 0)) {
            return Status::Invalid(Fmt("communication benchmark: the %.0f-GPU all-reduce fit has no bandwidth", g));
          }
          const double latency_us = std::max(0.0, f.coef[1]) * 1e6, bus_gbyte_s = bw / f.coef[0] / 1e9;
          auto* c = out.add_collective_latency();
          c->set_group_size(static_cast<uint32_t>(g));
          c->set_latency_us(Round(latency_us));
          c->set_bus_bandwidth_gbyte_s(Round(bus_gbyte_s));
          lines += Fmt(" g=%.0f %.1f us, %.1f GB/s (MAPE %.1f%%);", g, latency_us, bus_gbyte_s, f.mape * 100);
        }
        say("all-reduce per group size: latency and bus bandwidth" + lines);
        return out;
      }
      std::string alphas;
      for (const auto& [g, xy] : by_size) {
        // α(g): the median of (t − transfer) over the sizes whose transfer is at most half the time.
        std::vector<double> rest;
        for (size_t i = 0; i < xy.second.size(); ++i) {
          const double transfer = xy.first[i][0] / eff;
          if (transfer <= 0.5 * xy.second[i]) rest.push_back(xy.second[i] - transfer);
        }
        const double alpha = std::max(0.0, rest.empty() ? 0.0 : Median(rest));
        auto* c = out.add_collective_latency();
        c->set_group_size(static_cast<uint32_t>(g));
        c->set_latency_us(Round(alpha * 1e6));
        alphas += Fmt(" g=%.0f %.1f us;", g, alpha * 1e6);
      }
      say(Fmt("all-reduce: bus bandwidth %.3f of the link's (%.2f GB/s); per-call latency", eff, eff * bw / 1e9) + alphas);
    }
  }
  return out;
}

}  // namespace hetsim::calibration

namespace hetsim::calibration {
namespace {

// A kernel's two ideal times at unit efficiency, no fixed cost: its compute side (GEMMs and fused kernels)
// and its memory side.
struct IdealSides {
  double compute = 0, memory = 0;
};

std::string DTypeLabel(proto::DType d) {
  std::string s = proto::DType_Name(d);
  if (s.rfind("DTYPE_", 0) == 0) s = s.substr(6);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

IdealSides Sides(const models::Kernel& k, const models::GpuSpec& gpu, proto::DType dtype) {
  models::KernelParams unit = models::KernelParamsFor(gpu);
  unit.by_dtype.clear();
  unit.kernel_latency_s = 0;
  IdealSides s;
  if (k.type == models::Kernel::Type::kMemory) {
    unit.memory_efficiency = 1;
    s.memory = models::KernelGpuSeconds(k, gpu, unit, dtype);
    return s;
  }
  unit.gemm_efficiency = 1, unit.memory_efficiency = 1e12;
  s.compute = models::KernelGpuSeconds(k, gpu, unit, dtype);
  unit.gemm_efficiency = 1e12, unit.memory_efficiency = 1;
  s.memory = models::KernelGpuSeconds(k, gpu, unit, dtype);
  return s;
}

}  // namespace

Result<std::vector<LayerObservation>> ProfileObservations(const proto::Profile& profile, const std::string& where,
                                                          const models::GpuSpec& gpu, proto::DType dtype,
                                                          proto::Attention attention) {
  auto pgpu = models::GpuCatalog::Bundled().Find(profile.gpu());
  if (!pgpu.ok() || pgpu.value()->name != gpu.name) {
    return Status::Invalid(where + ": gpu: the profile is for '" + profile.gpu() + "', not " + gpu.name +
                           " (fit each GPU type on its own profiles)");
  }
  auto model = models::LoadModel(profile.model());
  if (!model.ok()) return Status::Invalid(where + ": model: " + model.status().message());
  if (profile.seq_len() == 0) return Status::Invalid(where + ": seq_len: must be at least 1");
  uint32_t block = 0;
  while (block < model->num_layers() && model->kind(block) != models::LayerKind::kTransformer) ++block;
  if (block == model->num_layers()) return Status::Invalid(where + ": model " + profile.model() + " has no block");
  std::vector<LayerObservation> out;
  for (const auto& l : profile.layers()) {
    if (l.layer() != proto::LayerTiming::LAYER_KIND_TRANSFORMER) continue;
    models::KernelShape shape;
    shape.micro_batch = l.micro_batch_size();
    shape.seq_len = profile.seq_len();
    shape.tp = l.tp_degree();
    shape.dtype = dtype;
    shape.attention = attention;
    // A forward and a backward pass together: what an iteration spends per block and micro-batch. (The
    // split between them is not fitted: one GEMM efficiency serves both, and measured backward passes of
    // some stacks take well over twice their forward.)
    if (!(l.forward_s() > 0) || !(l.backward_s() > 0)) continue;
    LayerObservation o;
    o.label = profile.model() + " tp " + std::to_string(l.tp_degree()) + " mb " +
              std::to_string(l.micro_batch_size()) + " forward + backward";
    o.tp = l.tp_degree();
    if (o.tp > 1) {
      o.tp_allreduce_bytes =
          models::TpAllReduceBytesPerLayer(*model, block, l.micro_batch_size(), profile.seq_len(), dtype);
    }
    o.kernels = models::LayerKernels(*model, block, models::Pass::kForward, shape);
    const auto bwd = models::LayerKernels(*model, block, models::Pass::kBackward, shape);
    o.kernels.insert(o.kernels.end(), bwd.begin(), bwd.end());
    o.seconds = l.forward_s() + l.backward_s();
    out.push_back(std::move(o));
  }
  if (std::none_of(out.begin(), out.end(), [](const LayerObservation& o) { return o.tp == 1; })) {
    return Status::Invalid(where + ": layers: no transformer row at tp_degree 1 with positive times (the "
                           "efficiencies are fitted on TP-1 rows; rows at higher TP include their TP communication)");
  }
  return out;
}

Result<proto::KernelCalibration> FitFromProfiles(const models::GpuSpec& gpu, proto::DType dtype,
                                                 const models::KernelParams& base,
                                                 const std::vector<LayerObservation>& all,
                                                 bool fit_tp_latency, FitSummary* summary, bool fit_tp_bandwidth) {
  std::vector<LayerObservation> observations, tp_rows;
  for (const auto& o : all) {
    if (o.tp == 1) {
      observations.push_back(o);
    } else if (fit_tp_latency || fit_tp_bandwidth) {
      tp_rows.push_back(o);
    }
  }
  if (observations.size() < 3) {
    return Status::Invalid("profile fit: " + std::to_string(observations.size()) +
                           " measured blocks; at least 3 are needed for two efficiencies");
  }
  auto say = [&](const std::string& s) {
    if (summary != nullptr) summary->lines.push_back(s);
  };
  std::vector<std::vector<IdealSides>> sides(observations.size());
  for (size_t i = 0; i < observations.size(); ++i) {
    for (const auto& k : observations[i].kernels) sides[i].push_back(Sides(k, gpu, dtype));
  }
  const double latency = base.kernel_latency_s;
  double ge = base.GemmEfficiency(dtype), me = base.MemoryEfficiency(dtype);
  bool memory_fitted = true;
  LinearFit fit;
  for (int round = 0; round < 4; ++round) {
    // Each GEMM on the side that binds it at the current values.
    std::vector<std::vector<double>> x;
    std::vector<double> y;
    for (size_t i = 0; i < observations.size(); ++i) {
      double a = 0, b = 0;
      for (const auto& s : sides[i]) {
        if (s.compute / ge >= s.memory / me) {
          a += s.compute;
        } else {
          b += s.memory;
        }
      }
      const double rest = observations[i].seconds - static_cast<double>(sides[i].size()) * latency;
      if (!(rest > 0)) continue;
      if (memory_fitted) {
        x.push_back({a, b});
        y.push_back(rest);
      } else {
        x.push_back({a});
        y.push_back(rest - b / me);
      }
    }
    if (y.size() < 3) return Status::Invalid("profile fit: fewer than 3 blocks longer than their kernels' launch floor");
    fit = RobustFit(x, y);
    if (memory_fitted && (fit.coef.size() < 2 || !(fit.coef[1] > 0) || !(fit.coef[0] > 0))) {
      // Not identifiable: the GEMM efficiency alone, at base's memory efficiency — base's values again, not
      // those of an earlier round of the two-coefficient fit.
      memory_fitted = false;
      ge = base.GemmEfficiency(dtype);
      me = base.MemoryEfficiency(dtype);
      round = -1;
      continue;
    }
    if (fit.coef.empty() || !(fit.coef[0] > 0)) {
      return Status::Invalid(
          "profile fit: no positive GEMM efficiency explains the measured blocks (their memory-bound kernels alone, at "
          "memory efficiency " + Fmt("%.3g", me) + ", take about as long as measured or longer): check --dtype and "
          "--attention against how the profile was measured, or leave this GPU type to its defaults");
    }
    ge = std::min(10.0, 1 / fit.coef[0]);
    if (memory_fitted) me = std::min(10.0, 1 / fit.coef[1]);
  }
  proto::KernelCalibration out;
  out.add_gpus(gpu.name);
  auto* d = out.add_by_dtype();
  d->set_dtype(dtype);
  d->set_gemm_efficiency(Round(ge));
  if (memory_fitted) d->set_memory_efficiency(Round(me));
  say(Fmt("%.0f measured blocks (TP 1, forward + backward); GEMM efficiency %.4f", static_cast<double>(fit.n), ge) +
      " in " + DTypeLabel(dtype) +
      (memory_fitted ? Fmt(", memory efficiency %.4f", me) : Fmt(", memory efficiency kept at %.4f (not identifiable)", me)) +
      Fmt("; kernel latency kept at %.2f us", latency * 1e6));
  // Per block, what the fitted model now says (the check a reader wants to see).
  CheckOnProfiles(gpu, dtype, base, out, observations, summary);
  // The per-call all-reduce latency per TP degree, from what the TP rows spend beyond their compute.
  models::KernelParams fitted = base;
  fitted.by_dtype = {{dtype, ge, me}};
  if (fit_tp_bandwidth) {
    FitTpCollectives(gpu, dtype, fitted, tp_rows, &out, summary);
    return out;
  }
  std::map<uint32_t, std::vector<double>> alpha;
  const double bw = (gpu.scale_up_bandwidth_gbyte_s > 0 ? gpu.scale_up_bandwidth_gbyte_s : gpu.pcie_bandwidth_gbyte_s) *
                    1e9 * base.collective_efficiency;
  for (const auto& o : tp_rows) {
    const double compute = models::TimeKernels(o.kernels, gpu, fitted, dtype).gpu_s;
    const double transfer = 2.0 * (o.tp - 1) / o.tp * o.tp_allreduce_bytes / bw;
    alpha[o.tp].push_back((o.seconds - compute - 4 * transfer) / 4);
  }
  for (const auto& [tp, values] : alpha) {
    const double a = std::max(0.0, Median(values));
    auto* c = out.add_collective_latency();
    c->set_group_size(tp);
    c->set_latency_us(Round(a * 1e6));
    say(Fmt("all-reduce latency at %.0f GPUs: %.1f us (median over %.0f TP rows of what they spend beyond the fitted "
            "compute and 4 ring all-reduces' transfers at %.0f GB/s)",
            tp, a * 1e6, static_cast<double>(values.size()), bw / 1e9));
  }
  return out;
}

void FitTpCollectives(const models::GpuSpec& gpu, proto::DType dtype, const models::KernelParams& fitted,
                      const std::vector<LayerObservation>& tp_rows, proto::KernelCalibration* out, FitSummary* summary) {
  std::map<uint32_t, std::vector<const LayerObservation*>> by_tp;
  for (const auto& o : tp_rows) by_tp[o.tp].push_back(&o);
  for (const auto& [tp, rows] : by_tp) {
    // What each row spends beyond its compute: its block's 4 all-reduces (2 forward, 2 backward), each
    // α + 2(t−1)/t · bytes / bus bandwidth — linear in (α, 1 / bandwidth).
    const double ring = 2.0 * (tp - 1) / tp;
    std::vector<std::vector<double>> x, x_bw;
    std::vector<double> y;
    for (const auto* o : rows) {
      const double rest = o->seconds - models::TimeKernels(o->kernels, gpu, fitted, dtype).gpu_s;
      if (!(rest > 0) || !(o->tp_allreduce_bytes > 0)) continue;
      x.push_back({4.0, 4 * ring * o->tp_allreduce_bytes});
      x_bw.push_back({4 * ring * o->tp_allreduce_bytes});
      y.push_back(rest);
    }
    if (y.size() < 2) {
      if (summary != nullptr) {
        summary->lines.push_back(Fmt("TP %.0f: fewer than 2 rows spend time beyond their compute; no collective fitted",
                                     static_cast<double>(tp)));
      }
      continue;
    }
    LinearFit fit = RobustFit(x, y);
    double alpha = fit.coef.size() == 2 ? fit.coef[0] : -1, inverse = fit.coef.size() == 2 ? fit.coef[1] : -1;
    if (!(alpha >= 0)) {  // no fixed cost to speak of: the bandwidth alone
      fit = RobustFit(x_bw, y);
      alpha = 0;
      inverse = fit.coef.empty() ? -1 : fit.coef[0];
    }
    if (!(inverse > 0)) {
      if (summary != nullptr) {
        summary->lines.push_back(Fmt("TP %.0f: the time beyond compute does not grow with the all-reduce's bytes; no "
                                     "bandwidth fitted", static_cast<double>(tp)));
      }
      continue;
    }
    auto* c = out->add_collective_latency();
    c->set_group_size(tp);
    c->set_latency_us(Round(alpha * 1e6));
    c->set_bus_bandwidth_gbyte_s(Round(1 / inverse / 1e9));
    if (summary != nullptr) {
      summary->lines.push_back(
          Fmt("all-reduce among %.0f GPUs: latency %.1f us, bus bandwidth %.3f GB/s", static_cast<double>(tp),
              alpha * 1e6, 1 / inverse / 1e9) +
          Fmt(" (fitted on %.0f TP rows: what they spend beyond the fitted compute as 4 ring all-reduces; MAPE %.1f%% "
              "of that time)", static_cast<double>(fit.n), 100 * fit.mape));
    }
  }
}

void CheckOnProfiles(const models::GpuSpec& gpu, proto::DType dtype, const models::KernelParams& base,
                     const proto::KernelCalibration& fitted, const std::vector<LayerObservation>& observations,
                     FitSummary* summary) {
  models::KernelParams p = base;
  for (const auto& d : fitted.by_dtype()) {
    if (d.dtype() == dtype) p.by_dtype = {{dtype, d.gemm_efficiency(), d.has_memory_efficiency() ? d.memory_efficiency() : 0}};
  }
  double mape = 0, bias = 0;
  std::vector<LayerObservation> tp1;
  for (const auto& o : observations) {
    if (o.tp == 1) tp1.push_back(o);
  }
  for (const auto& o : tp1) {
    const double model = models::TimeKernels(o.kernels, gpu, p, dtype).gpu_s;
    const double e = (model - o.seconds) / o.seconds;
    mape += std::abs(e) / static_cast<double>(tp1.size());
    bias += e / static_cast<double>(tp1.size());
    if (summary != nullptr) {
      summary->lines.push_back(Fmt("  %-6.4g s measured, %-6.4g s model (%+.1f%%)", o.seconds, model, 100 * e) + ": " +
                               o.label);
    }
  }
  if (summary != nullptr) {
    summary->lines.push_back(Fmt("%.0f TP-1 blocks: MAPE %.1f%%, bias %+.1f%%", static_cast<double>(tp1.size()),
                                 100 * mape, 100 * bias));
  }
}

}  // namespace hetsim::calibration
