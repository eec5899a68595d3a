#include "calibration/network_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "calibration/fit.h"

namespace hetsim::calibration {
namespace {

Result<proto::Nic::Kind> NicKind(const std::string& s, const std::string& where) {
  if (s == "infiniband") return proto::Nic::KIND_INFINIBAND;
  if (s == "roce") return proto::Nic::KIND_ROCE;
  if (s == "ethernet") return proto::Nic::KIND_ETHERNET;
  return Status::Invalid(where + ": column nic: '" + s + "' (expected infiniband, roce or ethernet)");
}

const char* NicName(proto::Nic::Kind k) {
  switch (k) {
    case proto::Nic::KIND_ROCE: return "roce";
    case proto::Nic::KIND_ETHERNET: return "ethernet";
    default: return "infiniband";
  }
}

// Σ |log(model / measured)| over `rows` under `net`: absolute rather than squared, so that a few calls
// measured far off (a first call's set-up, a rounded bandwidth) do not drag the fit.
double Loss(const std::vector<const NetworkRow*>& rows, const models::NetworkParams& net) {
  double sum = 0;
  for (const NetworkRow* r : rows) sum += std::fabs(std::log(NetworkModelSeconds(*r, net) / r->time_s));
  return sum;
}

}  // namespace

Result<std::vector<NetworkRow>> ReadNetworkBench(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(auto rows, ReadCsv(path, {"nodes", "gpus_per_node", "nic", "nic_gbps", "bytes", "time_us"}));
  std::vector<NetworkRow> out;
  for (const auto& r : rows) {
    const std::string where = path + ":" + r.at("#line");
    NetworkRow row;
    row.line = std::stoi(r.at("#line"));
    HETSIM_ASSIGN_OR_RETURN(double nodes, CsvNumber(r, "nodes", path));
    HETSIM_ASSIGN_OR_RETURN(double per_node, CsvNumber(r, "gpus_per_node", path));
    HETSIM_ASSIGN_OR_RETURN(double gbps, CsvNumber(r, "nic_gbps", path));
    HETSIM_ASSIGN_OR_RETURN(row.bytes, CsvNumber(r, "bytes", path));
    HETSIM_ASSIGN_OR_RETURN(double us, CsvNumber(r, "time_us", path));
    double nics = per_node;
    if (r.count("nics_per_node") && !r.at("nics_per_node").empty()) {
      HETSIM_ASSIGN_OR_RETURN(nics, CsvNumber(r, "nics_per_node", path));
    }
    const auto whole = [](double x, double lo, double hi) { return x >= lo && x <= hi && x == std::floor(x); };
    if (!whole(nodes, 2, 1e5)) return Status::Invalid(where + ": nodes must be a whole number >= 2 (calls across nodes)");
    if (!whole(per_node, 1, 1024)) return Status::Invalid(where + ": gpus_per_node must be a whole number in [1, 1024]");
    if (!whole(nics, 1, 64)) return Status::Invalid(where + ": nics_per_node must be a whole number in [1, 64]");
    if (!(gbps > 0 && gbps <= 1e7)) return Status::Invalid(where + ": nic_gbps must be in (0, 1e7]");
    if (!(row.bytes >= 1 && row.bytes <= 1e15)) return Status::Invalid(where + ": bytes must be in [1, 1e15]");
    if (!(us > 0 && us <= 1e12)) return Status::Invalid(where + ": time_us must be positive");
    HETSIM_ASSIGN_OR_RETURN(row.group.nic, NicKind(r.at("nic"), where));
    if (r.count("fabric") && !r.at("fabric").empty()) {
      const std::string& f = r.at("fabric");
      if (f != "nvlink" && f != "pcie") return Status::Invalid(where + ": column fabric: '" + f + "' (expected nvlink or pcie)");
      row.group.nvlink = f == "nvlink";
    }
    if (r.count("collective") && !r.at("collective").empty()) {
      const std::string& c = r.at("collective");
      if (c == "all_reduce") {
        row.collective = models::CollectiveKind::kAllReduce;
      } else if (c == "reduce_scatter") {
        row.collective = models::CollectiveKind::kReduceScatter;
      } else if (c == "all_gather") {
        row.collective = models::CollectiveKind::kAllGather;
      } else {
        return Status::Invalid(where + ": column collective: '" + c + "' (expected all_reduce, reduce_scatter or all_gather)");
      }
    }
    row.group.nodes = static_cast<uint32_t>(nodes);
    row.group.per_node = static_cast<uint32_t>(per_node);
    row.group.ranks = row.group.nodes * row.group.per_node;
    row.group.node_bandwidth_bytes_s = std::min(nics, per_node) * gbps * 1e9 / 8;
    row.time_s = us * 1e-6;
    out.push_back(row);
  }
  if (out.empty()) return Status::Invalid(path + ": no measurements");
  return out;
}

double NetworkModelSeconds(const NetworkRow& row, const models::NetworkParams& net) {
  return models::ChooseNccl(row.collective, row.bytes, row.group, net).seconds;
}

std::vector<NetworkFit> FitNetwork(const std::vector<NetworkRow>& rows, const std::string& base_calibration) {
  std::map<proto::Nic::Kind, std::vector<const NetworkRow*>> by_kind;
  for (const auto& r : rows) by_kind[r.group.nic].push_back(&r);
  std::vector<NetworkFit> out;
  for (const auto& [kind, part] : by_kind) {
    models::NetworkParams net = models::NetworkParamsFor(kind, base_calibration);
    NetworkFit f;
    for (const NetworkRow* r : part) {
      f.base_mape += std::fabs(NetworkModelSeconds(*r, net) / r->time_s - 1) / static_cast<double>(part.size());
    }
    // Grid over efficiency (0.01 steps) and latency (2 us steps), then 0.001 and 0.1 us around the best.
    double best_e = net.bus_efficiency, best_l = net.net_latency_s * 1e6;
    double best = std::numeric_limits<double>::infinity();
    const auto search = [&](double e0, double e1, double de, double l0, double l1, double dl) {
      for (double e = std::max(e0, de); e <= std::min(e1, 1.0) + 1e-12; e += de) {
        for (double l = std::max(l0, 0.0); l <= std::min(l1, 500.0) + 1e-12; l += dl) {
          net.bus_efficiency = std::min(e, 1.0);
          net.net_latency_s = l * 1e-6;
          const double loss = Loss(part, net);
          if (loss < best) best = loss, best_e = net.bus_efficiency, best_l = l;
        }
      }
    };
    search(0.01, 1.0, 0.01, 0, 500, 2);
    search(best_e - 0.01, best_e + 0.01, 0.001, best_l - 2, best_l + 2, 0.1);
    net.bus_efficiency = best_e;
    net.net_latency_s = best_l * 1e-6;
    f.n = part.size();
    for (const NetworkRow* r : part) {
      const double e = std::fabs(NetworkModelSeconds(*r, net) / r->time_s - 1);
      f.mape += e / static_cast<double>(part.size());
      f.worst = std::max(f.worst, e);
    }
    f.entry.add_nics(kind);
    f.entry.set_bus_efficiency(std::round(best_e * 1000) / 1000);
    f.entry.set_net_latency_us(std::round(best_l * 10) / 10);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "fitted under NCCL's model on %zu measured calls over %s (MAPE %.1f%%, worst %.1f%%; the base's "
                  "values: %.1f%%)",
                  part.size(), NicName(kind), 100 * f.mape, 100 * f.worst, 100 * f.base_mape);
    f.entry.set_source(buf);
    out.push_back(f);
  }
  return out;
}

}  // namespace hetsim::calibration
