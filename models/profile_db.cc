// Placeholder implementation until the profile loader lands: no profiles.
#include "models/profile_db.h"

namespace hetsim::models {

Result<ProfileDb> ProfileDb::Load(const std::vector<std::string>& names_or_paths) {
  if (!names_or_paths.empty()) return Status::Invalid("profiles are not supported yet");
  return ProfileDb();
}

Status ProfileDb::Add(const proto::Profile&, const std::string& file) {
  return Status::Invalid(file + ": profiles are not supported yet");
}

std::optional<LayerCost> ProfileDb::Lookup(const std::string&, const std::string&, LayerKind, uint32_t, double,
                                           uint32_t) const {
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> ProfileDb::Coverage() const { return {}; }

}  // namespace hetsim::models
