// The GPU catalog: peak throughput, memory and links of every GPU type hetsim knows.
//
// Built from models/catalog/gpus.csv (embedded in the binary); each row keeps its sources.
#pragma once

#include <string>
#include <vector>

#include "models/proto/training.pb.h"
#include "models/status.h"

namespace hetsim::models {

// Block-scaled tensor formats: blocks of narrow elements sharing one scale. The OCP microscaling formats
// (MX: 32 elements per E8M0 scale) and NVIDIA's NVFP4 (16 FP4 elements per E4M3 scale). They are not training
// dtypes of proto::DType; the catalog records which ones a part's tensor cores run natively.
enum class BlockScaledFormat { kMxfp8, kMxfp6, kMxfp4, kNvfp4 };
inline constexpr BlockScaledFormat kBlockScaledFormats[] = {BlockScaledFormat::kMxfp8, BlockScaledFormat::kMxfp6,
                                                            BlockScaledFormat::kMxfp4, BlockScaledFormat::kNvfp4};
// "mxfp8", "mxfp6", "mxfp4", "nvfp4": the spellings of gpus.csv's block_scaled column.
const char* BlockScaledFormatName(BlockScaledFormat f);

struct GpuSpec {
  std::string name;                  // canonical lower-case name, e.g. "a100-80gb"
  std::vector<std::string> aliases;  // other accepted spellings, e.g. "A100-80"
  std::string vendor;
  std::string form_factor;
  double peak_bf16_tflops = 0;  // dense tensor-core peak; 0 = no BF16 support
  double peak_fp16_tflops = 0;
  double peak_fp32_tflops = 0;
  double peak_tf32_tflops = 0;  // dense TF32 tensor-core peak; 0 = none
  double peak_fp8_tflops = 0;   // dense FP8 tensor-core peak; 0 = none
  double memory_gib = 0;
  double hbm_bandwidth_gbyte_s = 0;
  std::string scale_up;  // nvswitch | nvlink | pcie | xgmi
  double scale_up_bandwidth_gbyte_s = 0;  // per GPU, one direction; 0 when scale_up is pcie
  int pcie_gen = 0;
  double pcie_bandwidth_gbyte_s = 0;  // per GPU, one direction
  double peak_fp6_tflops = 0;  // dense FP6 tensor-core peak; 0 = none
  double peak_fp4_tflops = 0;  // dense FP4 tensor-core peak; 0 = none
  std::vector<BlockScaledFormat> block_scaled;  // formats the tensor cores run natively (gpus.csv order)
  int sm_count = 0;     // streaming multiprocessors / compute units; 0 = none (no wave quantisation)
  double tdp_w = 0;     // maximum board or module power; 0 = not recorded
  std::string source;

  // Peak TFLOPS for `dtype`'s matmuls, or 0 when the GPU cannot compute in it. TF32 training (FP32 tensors
  // with PyTorch's allow_tf32) runs its matmuls in FP32 on parts without TF32 tensor cores (Volta, Turing,
  // Pascal): the flag permits TF32, it does not require it, so a cluster of Ampere and Turing cards trains
  // in one dtype with each card at its own rate.
  double PeakTflops(proto::DType dtype) const;
  // The math `dtype` runs on this part: FP32 for TF32 where the part has no TF32 mode, else `dtype`.
  proto::DType MathDType(proto::DType dtype) const;
  // Dense FP6 / FP4 tensor-core peaks (0 = no such mode). Not reachable through PeakTflops: FP6 and FP4 are no
  // training dtypes of proto::DType.
  double PeakFp6Tflops() const { return peak_fp6_tflops; }
  double PeakFp4Tflops() const { return peak_fp4_tflops; }
  // Whether the tensor cores run `f` natively (block scaling in hardware, not emulated by the kernel).
  bool SupportsBlockScaled(BlockScaledFormat f) const;
  // The dense peak at which `f` runs: its element type's peak (MXFP8: FP8, MXFP6: FP6, MXFP4 and NVFP4: FP4)
  // where the part runs `f` natively, else 0.
  double PeakBlockScaledTflops(BlockScaledFormat f) const;
};

// "bf16", "fp16", "fp32", "fp8", "tf32".
const char* DTypeName(proto::DType dtype);
// A dtype `gpu` can train in, other than `unusable` (for error messages): bf16, fp16 or fp32, in that order.
const char* SuggestedDType(const GpuSpec& gpu, proto::DType unusable);
// Why `gpu` cannot run a training's FP8 recipe (MXFP8 and NVFP4 need tensor cores that run the block-scaled
// format natively), with the fix; empty when it can (any other recipe, or another dtype).
std::string RecipeUnsupported(const GpuSpec& gpu, proto::DType dtype, proto::Fp8Recipe recipe);

class GpuCatalog {
 public:
  // The catalog bundled with hetsim.
  static const GpuCatalog& Bundled();
  // Parses a catalog CSV (see models/catalog/gpus.csv for the columns); `file` names it in errors.
  static Result<GpuCatalog> Parse(const std::string& csv_text, const std::string& file);

  // Looks a GPU up by name or alias (case-insensitive). Unknown names get a suggestion.
  Result<const GpuSpec*> Find(const std::string& name) const;
  const std::vector<GpuSpec>& gpus() const { return gpus_; }

 private:
  std::vector<GpuSpec> gpus_;
};

// Splits one CSV line; fields may be double-quoted (with "" for a quote). The catalog's gpus.csv and
// validate-sim's run files read with it.
std::vector<std::string> SplitCsv(const std::string& line);
// A flag's comma-separated list, its empty items dropped: "a,b,,c" -> {a, b, c}.
std::vector<std::string> SplitList(const std::string& s);
// `s` without the spaces and tabs around it (a CSV cell as written by hand).
std::string TrimBlanks(const std::string& s);
// One CSV cell: `s` itself, or double-quoted (quotes doubled) when it holds a comma, quote or newline.
std::string CsvCell(const std::string& s);

}  // namespace hetsim::models
