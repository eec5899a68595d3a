// Loading specification files by bundled name or by path.
//
// Every `--cluster`, `--model`, … argument is either a path to a YAML file or the name of a bundled
// spec (`hetsim list clusters`). A file's top-level `kind:` key says what it is; a file of the wrong
// kind, an unknown name or a malformed file gives one clear error naming the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "models/bundled.h"
#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/profile.pb.h"
#include "models/proto/training.pb.h"
#include "models/transformer.h"

namespace hetsim::models {

// "cluster", "model", "training", "plan", "profile".
std::string SpecKindName(SpecKind kind);
// Names of bundled specs of `kind`, sorted.
std::vector<std::string> BundledNames(SpecKind kind);

// Where a spec's text came from: a path on disk or a bundled file ("models/catalog/…").
struct SpecText {
  std::string file;  // for messages
  std::string text;
  bool bundled = false;
};

// The largest spec file read (YAML parsing runs at a few MB/s and holds ~50x the text in memory; a large
// trace belongs in binary protobuf, traces/trace.h).
constexpr uintmax_t kMaxSpecBytes = 64ull << 20;
// Traces are parsed an event at a time (models/yaml_stream.h), in the memory of their events: their YAML
// may be large enough for traces::kMaxTraceEvents events (~130 bytes each as `hetsim trace` writes them).
constexpr uintmax_t kMaxTraceYamlBytes = 256ull << 20;

// Reads `name_or_path`: an existing file (at most kMaxSpecBytes, kMaxTraceYamlBytes for a trace; not a folder or a device), else a bundled
// spec of `kind` with that name.
Result<SpecText> ReadSpec(SpecKind kind, const std::string& name_or_path);
// The kind a YAML text declares with its `kind:` key.
Result<SpecKind> DetectKind(const std::string& text, const std::string& file);

Result<Cluster> LoadCluster(const std::string& name_or_path);
Result<TransformerModel> LoadModel(const std::string& name_or_path);
// An unresolved training spec (see ResolveTraining).
Result<proto::Training> LoadTraining(const std::string& name_or_path);
Result<proto::Plan> LoadPlan(const std::string& path);
Result<proto::Profile> LoadProfile(const std::string& name_or_path);

// Parses `text` as a message of `kind`'s type after checking its `kind:` key.
template <typename Message>
Status ParseSpec(const SpecText& src, SpecKind kind, Message* msg);

// A spec's reference to another file (a plan's `cluster:`, a manifest's `plan:`, a trace's `cluster:`),
// resolved against the folder of `from_file` only, never the current folder: an absolute path stays; a
// relative path (a '/' or a file extension such as .yaml/.csv) is taken beside `from_file`; a bare name is
// the file of that name beside `from_file` when one exists, else a bundled name. When `from_file` is not a
// file on disk (a bundled spec, an inline string) the reference is returned as written.
std::string ResolveRelative(const std::string& ref, const std::string& from_file);

// Writes `text` to `path` atomically: a fresh temporary file beside it (created with O_EXCL|O_NOFOLLOW, so
// a planted link is never followed), then rename. A link at `path` itself is replaced, not written through.
Status WriteFileAtomically(const std::string& path, const std::string& text);
// The same for text produced in pieces (a report too large to hold as one string): `produce` hands each
// piece to `put`, in order; an error from either leaves nothing at `path`.
using PieceSink = std::function<Status(std::string_view piece)>;
Status WriteFileAtomically(const std::string& path, const std::function<Status(const PieceSink& put)>& produce);
// Whether `path` can be written (its folder exists and is writable, it is not a folder), checked before a
// long computation whose result goes there; `flag` names it in the error ("--report-out").
Status CheckWritable(const std::string& path, const std::string& flag);

}  // namespace hetsim::models
