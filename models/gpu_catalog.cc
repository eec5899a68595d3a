#include "models/gpu_catalog.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "models/bundled.h"
#include "models/suggest.h"

namespace hetsim::models {
// Splits one CSV line; fields may be double-quoted (with "" for a quote).
std::string CsvCell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string TrimBlanks(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size()) {
    const size_t end = std::min(s.find(',', begin), s.size());
    if (end > begin) out.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}


double GpuSpec::PeakTflops(proto::DType dtype) const {
  switch (MathDType(dtype)) {
    case proto::DTYPE_FP16: return peak_fp16_tflops;
    case proto::DTYPE_FP32: return peak_fp32_tflops;
    case proto::DTYPE_TF32: return peak_tf32_tflops;
    case proto::DTYPE_FP8: return peak_fp8_tflops;
    default: return peak_bf16_tflops;
  }
}

proto::DType GpuSpec::MathDType(proto::DType dtype) const {
  return dtype == proto::DTYPE_TF32 && peak_tf32_tflops <= 0 ? proto::DTYPE_FP32 : dtype;
}

std::string RecipeUnsupported(const GpuSpec& gpu, proto::DType dtype, proto::Fp8Recipe recipe) {
  if (dtype != proto::DTYPE_FP8 || (recipe != proto::FP8_RECIPE_MXFP8 && recipe != proto::FP8_RECIPE_NVFP4)) return "";
  const BlockScaledFormat f = recipe == proto::FP8_RECIPE_MXFP8 ? BlockScaledFormat::kMxfp8 : BlockScaledFormat::kNvfp4;
  if (gpu.SupportsBlockScaled(f)) return "";
  return "a " + gpu.name + " has no native " + BlockScaledFormatName(f) + " tensor cores (gpus.csv block_scaled); set " +
         "fp8_recipe: current, delayed or blockwise, or use GPUs that run " + BlockScaledFormatName(f) +
         " (e.g. b200, gb200)";
}

const char* BlockScaledFormatName(BlockScaledFormat f) {
  switch (f) {
    case BlockScaledFormat::kMxfp8: return "mxfp8";
    case BlockScaledFormat::kMxfp6: return "mxfp6";
    case BlockScaledFormat::kMxfp4: return "mxfp4";
    case BlockScaledFormat::kNvfp4: return "nvfp4";
  }
  return "?";
}

bool GpuSpec::SupportsBlockScaled(BlockScaledFormat f) const {
  return std::find(block_scaled.begin(), block_scaled.end(), f) != block_scaled.end();
}

double GpuSpec::PeakBlockScaledTflops(BlockScaledFormat f) const {
  if (!SupportsBlockScaled(f)) return 0;
  switch (f) {
    case BlockScaledFormat::kMxfp8: return peak_fp8_tflops;
    case BlockScaledFormat::kMxfp6: return peak_fp6_tflops;
    default: return peak_fp4_tflops;
  }
}

const char* DTypeName(proto::DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FP16: return "fp16";
    case proto::DTYPE_FP32: return "fp32";
    case proto::DTYPE_TF32: return "tf32";
    case proto::DTYPE_FP8: return "fp8";
    default: return "bf16";
  }
}

const char* SuggestedDType(const GpuSpec& gpu, proto::DType unusable) {
  if (gpu.peak_bf16_tflops > 0 && unusable != proto::DTYPE_BF16) return "bf16";
  if (gpu.peak_fp16_tflops > 0 && unusable != proto::DTYPE_FP16) return "fp16";
  return "fp32";
}

namespace {

const std::vector<std::string> kColumns = {
    "name",           "aliases",          "vendor",           "form_factor",     "peak_bf16_tflops",
    "peak_fp16_tflops", "peak_fp32_tflops", "peak_tf32_tflops", "peak_fp8_tflops", "memory_gib",
    "hbm_bandwidth_gbyte_s", "scale_up",   "scale_up_bandwidth_gbyte_s", "pcie_gen", "pcie_bandwidth_gbyte_s",
    "peak_fp6_tflops", "peak_fp4_tflops", "block_scaled",     "sm_count",        "tdp_w",
    "source"};

// Column index by name (the header is checked against kColumns, so the order is fixed).
size_t Col(const char* name) {
  return static_cast<size_t>(std::find(kColumns.begin(), kColumns.end(), name) - kColumns.begin());
}

// The block_scaled cell ("mxfp8;nvfp4", or empty): each format known, none twice, and the part has the
// element type's peak the format runs at.
void ParseBlockScaled(const std::string& cell, const std::string& where, GpuSpec* g, ErrorList* errors) {
  std::vector<std::string> names;
  for (BlockScaledFormat f : kBlockScaledFormats) names.push_back(BlockScaledFormatName(f));
  std::istringstream in(cell);
  for (std::string item; std::getline(in, item, ';');) {
    item = TrimBlanks(item);
    if (item.empty()) continue;
    auto it = std::find(names.begin(), names.end(), AsciiLower(item));
    if (it == names.end()) {
      errors->Add(where + "block_scaled: unknown format '" + item + "'" + DidYouMean(item, names) +
                  " (expected ';'-separated names from: mxfp8, mxfp6, mxfp4, nvfp4)");
      continue;
    }
    const BlockScaledFormat f = kBlockScaledFormats[it - names.begin()];
    if (g->SupportsBlockScaled(f)) {
      errors->Add(where + "block_scaled: '" + item + "' is listed twice");
      continue;
    }
    g->block_scaled.push_back(f);
    if (g->PeakBlockScaledTflops(f) <= 0) {
      const char* peak = f == BlockScaledFormat::kMxfp8   ? "peak_fp8_tflops"
                         : f == BlockScaledFormat::kMxfp6 ? "peak_fp6_tflops"
                                                          : "peak_fp4_tflops";
      errors->Add(where + "block_scaled: lists '" + item + "' but " + peak +
                  " is 0; give the part's dense peak for that element type or drop '" + item + "'");
    }
  }
}

// One data row (already split into kColumns.size() cells); errors name `where` (file:line: ) and the column.
GpuSpec ParseRow(const std::vector<std::string>& cells, const std::string& where, ErrorList* errors) {
  auto num = [&](const char* column, double* out) {
    const std::string& s = cells[Col(column)];
    const auto res = std::from_chars(s.data(), s.data() + s.size(), *out);
    if (res.ec != std::errc() || res.ptr != s.data() + s.size() || *out < 0) {
      errors->Add(where + column + ": expected a non-negative number, found '" + s + "'");
    }
  };
  auto whole = [&](const char* column, int* out) {
    double v = 0;
    num(column, &v);
    if (v > 1e6 || v != std::floor(v)) {
      errors->Add(where + column + ": expected a whole number up to 10^6, found '" + cells[Col(column)] + "'");
      v = 0;
    }
    *out = static_cast<int>(v);
  };
  GpuSpec g;
  g.name = cells[Col("name")];
  std::istringstream al(cells[Col("aliases")]);
  for (std::string a; std::getline(al, a, ';');) {
    if (!a.empty()) g.aliases.push_back(a);
  }
  g.vendor = cells[Col("vendor")];
  g.form_factor = cells[Col("form_factor")];
  num("peak_bf16_tflops", &g.peak_bf16_tflops);
  num("peak_fp16_tflops", &g.peak_fp16_tflops);
  num("peak_fp32_tflops", &g.peak_fp32_tflops);
  num("peak_tf32_tflops", &g.peak_tf32_tflops);
  num("peak_fp8_tflops", &g.peak_fp8_tflops);
  num("memory_gib", &g.memory_gib);
  num("hbm_bandwidth_gbyte_s", &g.hbm_bandwidth_gbyte_s);
  g.scale_up = cells[Col("scale_up")];
  num("scale_up_bandwidth_gbyte_s", &g.scale_up_bandwidth_gbyte_s);
  double gen = 0;
  num("pcie_gen", &gen);
  g.pcie_gen = static_cast<int>(gen);
  num("pcie_bandwidth_gbyte_s", &g.pcie_bandwidth_gbyte_s);
  num("peak_fp6_tflops", &g.peak_fp6_tflops);
  num("peak_fp4_tflops", &g.peak_fp4_tflops);
  ParseBlockScaled(cells[Col("block_scaled")], where, &g, errors);
  whole("sm_count", &g.sm_count);
  num("tdp_w", &g.tdp_w);
  g.source = cells[Col("source")];
  static const std::vector<std::string> kFabrics = {"nvswitch", "nvlink", "pcie", "xgmi"};
  if (std::find(kFabrics.begin(), kFabrics.end(), g.scale_up) == kFabrics.end()) {
    errors->Add(where + "scale_up: unknown fabric '" + g.scale_up + "'" + DidYouMean(g.scale_up, kFabrics));
  }
  return g;
}

}  // namespace

Result<GpuCatalog> GpuCatalog::Parse(const std::string& csv_text, const std::string& file) {
  GpuCatalog cat;
  ErrorList errors;
  std::istringstream in(csv_text);
  std::string line;
  int line_no = 0;
  bool header_seen = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    auto cells = SplitCsv(line);
    const std::string where = file + ":" + std::to_string(line_no) + ": ";
    if (!header_seen) {
      if (cells != kColumns) {
        std::string want;
        for (const auto& c : kColumns) want += (want.empty() ? "" : ",") + c;
        return Status::Invalid(where + "unexpected header; expected the columns " + want);
      }
      header_seen = true;
      continue;
    }
    if (cells.size() != kColumns.size()) {
      errors.Add(where + "expected " + std::to_string(kColumns.size()) + " columns, found " +
                 std::to_string(cells.size()));
      continue;
    }
    cat.gpus_.push_back(ParseRow(cells, where, &errors));
  }
  if (!header_seen) errors.Add(file + ": no header line");
  if (!errors.empty()) return errors.ToStatus();
  return cat;
}

const GpuCatalog& GpuCatalog::Bundled() {
  static const GpuCatalog* cat = [] {
    auto r = Parse(std::string(BundledGpuCatalogCsv()), "models/catalog/gpus.csv");
    HETSIM_CHECK(r.ok(), r.status().message());
    return new GpuCatalog(std::move(r).value());
  }();
  return *cat;
}

Result<const GpuSpec*> GpuCatalog::Find(const std::string& name) const {
  const std::string want = AsciiLower(name);
  std::vector<std::string> names;
  for (const auto& g : gpus_) {
    if (AsciiLower(g.name) == want) return &g;
    for (const auto& a : g.aliases) {
      if (AsciiLower(a) == want) return &g;
    }
    names.push_back(g.name);
  }
  // Suggest the canonical name of the closest name or alias.
  std::vector<std::string> spellings;
  std::vector<const GpuSpec*> owners;
  for (const auto& g : gpus_) {
    spellings.push_back(g.name);
    owners.push_back(&g);
    for (const auto& a : g.aliases) {
      spellings.push_back(a);
      owners.push_back(&g);
    }
  }
  const std::string nearest = NearestName(name, spellings);
  std::string hint;
  for (size_t i = 0; i < spellings.size() && !nearest.empty(); ++i) {
    if (spellings[i] == nearest) {
      hint = "; did you mean '" + owners[i]->name + "'?";
      break;
    }
  }
  return Status::NotFound("unknown GPU type '" + name + "'" + hint + " (`hetsim list gpus` prints the catalog)");
}

}  // namespace hetsim::models
