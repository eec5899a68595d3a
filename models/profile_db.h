// Measured per-layer costs, looked up by (GPU type, model, layer kind, TP degree, micro-batch size).
//
// Loaded from profile files (models/proto/profile.proto): bundled ones (models/catalog/profiles/, e.g.
// converted from the Sailor measurements) or user files. A lookup at a micro-batch size that was not
// measured is composed from measured ones the way Metis §4.3 does (7 = 4 + 2 + 1: the binary
// decomposition of the size into measured sizes, summing their times); a size that cannot be composed
// is interpolated linearly between the nearest measured sizes (extrapolated from the largest two).
// Composition and interpolation apply to forward_s, backward_s and activation_gib; the optimizer step does
// not depend on the micro-batch size, so a size that was not measured gets optimizer_s of the nearest
// measured size. Below the smallest measured size the values are extrapolated from the smallest two (never
// below 0); a single measured size is scaled in proportion. Per-micro-batch overheads (fb_sync, batch
// generation; Metis's released profiles) are looked up per (GPU, model, TP, micro-batch) by the same
// rules. docs/profiles.md has the details and the bundled data.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "models/proto/profile.pb.h"
#include "models/status.h"
#include "models/transformer.h"

namespace YAML {
class Node;
}

namespace hetsim::models {

struct LayerCost {
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
  bool includes_tp_communication = false;  // see proto::Profile
  // Activations kept for the backward pass per micro-batch (GiB, one GPU of the TP group, no
  // recomputation); meaningful only when has_activation (every measured size of this layer has one).
  double activation_gib = 0;
  bool has_activation = false;
};

// Costs of one micro-batch outside the layers (proto::MicroBatchOverhead).
struct MicroBatchOverheadCost {
  double fb_sync_s = 0;           // on the last pipeline stage
  double batch_generation_s = 0;  // on the first pipeline stage
};

class ProfileDb {
 public:
  // Loads profiles by bundled name or path. GPU names are resolved through the GPU catalog, so
  // "A100-40" and "a100-40gb" are the same GPU. Errors name the file and key path.
  static Result<ProfileDb> Load(const std::vector<std::string>& names_or_paths);

  // Adds one profile (its `gpu` must be a catalog name or alias); `file` names it in errors.
  Status Add(const proto::Profile& profile, const std::string& file);

  // Cost of one layer of `kind` for `model` (the model's name), on `gpu` (catalog canonical name), at
  // TP degree `tp`, `micro_batch_size` sequences of `seq_len` tokens. nullopt when there is no profile
  // for that (gpu, model, seq_len, tp).
  std::optional<LayerCost> Lookup(const std::string& gpu, const std::string& model, LayerKind kind, uint32_t tp,
                                  double micro_batch_size, uint32_t seq_len) const;

  // Per-micro-batch overheads of `model` on `gpu` at TP degree `tp` for `micro_batch_size` sequences of
  // `seq_len` tokens; nullopt when no profile has overheads for that (gpu, model, seq_len, tp).
  std::optional<MicroBatchOverheadCost> Overhead(const std::string& gpu, const std::string& model, uint32_t tp,
                                                 double micro_batch_size, uint32_t seq_len) const;

  bool empty() const { return table_.empty() && overheads_.empty(); }
  // (gpu, model) pairs that have profiles, for messages and `hetsim list profiles`.
  std::vector<std::pair<std::string, std::string>> Coverage() const;

 private:
  // (gpu, model, seq_len, layer kind, tp) -> micro-batch size -> cost
  using Key = std::tuple<std::string, std::string, uint32_t, int, uint32_t>;
  std::map<Key, std::map<uint32_t, LayerCost>> table_;
  // Where each entry of table_ came from ("FILE layers[3]"), for duplicate errors.
  std::map<Key, std::map<uint32_t, std::string>> origin_;
  // (gpu, model, seq_len, tp) -> micro-batch size -> overheads, and where each came from.
  using OverheadKey = std::tuple<std::string, std::string, uint32_t, uint32_t>;
  std::map<OverheadKey, std::map<uint32_t, MicroBatchOverheadCost>> overheads_;
  std::map<OverheadKey, std::map<uint32_t, std::string>> overhead_origin_;
  // The catalog's canonical name of `gpu` (an alias is accepted), or "" when unknown.
  static std::string Canonical(const std::string& gpu);

  // Add, with the parsed YAML (or nullptr) to put line numbers into errors.
  Status AddParsed(const proto::Profile& profile, const std::string& file, const YAML::Node* root);
};

}  // namespace hetsim::models
