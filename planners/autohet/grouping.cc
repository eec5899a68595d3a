// AutoHet §III-B: device grouping by effective computing power (eq. 2-3), solved exactly with CBC.
//
// The paper's program has a binary x_ij per GPU i and group j, y_j for non-empty groups and maximises
// (Σ_j y_j) · z, z the smallest effective computing power E_j = (1 − β_j) Σ_i c_i x_ij (eq. 2) of the valid
// groups, subject to memory (3b), the definition of z (3c, big-M for empty groups), y (3d) and every GPU in
// exactly one group (3e). It is non-linear twice: the product (Σ y)·z and β_j, which depends on the group's
// stage count. We solve it exactly as follows (the "linearisation per number of groups"):
//   - D = Σ_j y_j is enumerated by the caller (Algorithm 1 lines 3-8 generate one grouping per D), so the
//     objective is D · max z and every one of the D groups is non-empty;
//   - GPUs of one type (TP groups of one type, §II-B) are interchangeable in eq. 3, so a group is described
//     by its composition n = (n_1..n_K), entities of each type; E depends on n alone (its stage count is
//     Σ n_k). The compositions that satisfy 3b and have 1..s_max stages are enumerated with their E_n;
//   - for a threshold τ, "some grouping has every E_j ≥ τ" is the integer feasibility problem
//     Σ_n g_n = D, Σ_n g_n n_k = N_k for every type (3e), g_n ∈ Z≥0 over the compositions with E_n ≥ τ.
//     It is monotone in τ, so a binary search over the distinct E_n values finds the largest feasible τ,
//     which is max z, exactly; each step is a small integer program for CBC (K + 1 rows);
//   - among the groupings reaching max z, a last program keeps one of largest Σ_j E_j (a tie-break the
//     paper leaves open).
// An earlier formulation with per-group stage-count binaries and big-M power splits was also exact but
// CBC needed minutes at 64 GPUs of three types (bench_autohet); this one needs a few programs of one row
// per type.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_set>

#include "planners/autohet/internal.h"
#include "planners/milp.h"

namespace hetsim::planners::autohet {

double BubbleRatio(uint32_t stages, uint32_t micro_batches) {
  if (stages == 0) return 0;
  return (stages - 1.0) / (micro_batches + stages - 1.0);
}

double EffectivePower(const std::vector<uint32_t>& counts, const std::vector<EntityType>& types,
                      uint32_t micro_batches) {
  double power = 0;
  uint32_t stages = 0;
  for (size_t k = 0; k < types.size(); ++k) {
    power += counts[k] * types[k].power;
    stages += counts[k];
  }
  return (1 - BubbleRatio(stages, micro_batches)) * power;
}

namespace {

struct Composition {
  std::vector<uint32_t> n;  // entities per type
  double power = 0;         // E_n (eq. 2)
};

// Every composition with 1..s_max entities that satisfies eq. 3b.
std::vector<Composition> Compositions(const GroupingInput& in, uint32_t s_max) {
  std::vector<Composition> out;
  std::vector<uint32_t> n(in.types.size(), 0);
  // Odometer over 0..count per type.
  for (;;) {
    uint32_t stages = 0;
    double mem = 0;
    for (size_t k = 0; k < n.size(); ++k) {
      stages += n[k];
      mem += n[k] * in.types[k].memory_gib;
    }
    if (stages >= 1 && stages <= s_max && mem >= in.required_gib) {
      out.push_back({n, EffectivePower(n, in.types, in.micro_batches)});
    }
    size_t k = 0;
    while (k < n.size() && n[k] == std::min(in.types[k].count, s_max)) n[k++] = 0;
    if (k == n.size()) break;
    ++n[k];
  }
  return out;
}

// Integer program: D groups from compositions with E ≥ tau using every entity (3e); with `best_sum`, the
// one of largest Σ E. `g` receives each composition's variable (−1: not in the program). False when no
// composition reaches tau (then nothing is built).
bool Build(const GroupingInput& in, const std::vector<Composition>& comps, double tau, bool best_sum, Milp* p,
           std::vector<int>* g) {
  g->assign(comps.size(), -1);
  std::vector<std::pair<int, double>> count;
  std::vector<std::vector<std::pair<int, double>>> type(in.types.size());
  for (size_t c = 0; c < comps.size(); ++c) {
    if (comps[c].power < tau) continue;
    (*g)[c] = p->AddVar(0, in.groups, best_sum ? comps[c].power : 0.0, true);
    count.push_back({(*g)[c], 1});
    for (size_t k = 0; k < in.types.size(); ++k) {
      if (comps[c].n[k] > 0) type[k].push_back({(*g)[c], static_cast<double>(comps[c].n[k])});
    }
  }
  if (count.empty()) return false;
  p->AddRow(count, in.groups, in.groups);
  for (size_t k = 0; k < in.types.size(); ++k) p->AddRow(type[k], in.types[k].count, in.types[k].count);
  return true;
}

// Solves `p`, counted in `out`'s statistics: its solution, or nullopt when it is infeasible; an error when
// the time limit left it open.
Result<std::optional<MilpSolution>> Run(const GroupingInput& in, const Milp& p, Grouping* out) {
  HETSIM_ASSIGN_OR_RETURN(MilpSolution s, p.Solve(in.time_limit_s));
  ++out->programs;
  out->nodes += s.nodes;
  out->seconds += s.seconds;
  if (s.has_solution()) return std::optional<MilpSolution>(std::move(s));
  if (s.outcome == MilpSolution::kInfeasible) return std::optional<MilpSolution>{};
  return Status::Infeasible("autohet: the device-grouping program (eq. 3, D = " + std::to_string(in.groups) +
                            ") reached solver_time_limit_s = " + std::to_string(in.time_limit_s) +
                            " s without an answer; raise it");
}

// The solution's number of groups per composition.
std::vector<uint32_t> Chosen(const std::vector<int>& g, const MilpSolution& s) {
  std::vector<uint32_t> chosen(g.size(), 0);
  for (size_t c = 0; c < g.size(); ++c) {
    if (g[c] >= 0) chosen[c] = static_cast<uint32_t>(s.values[static_cast<size_t>(g[c])]);
  }
  return chosen;
}

// Whether `chosen` is a grouping (D groups, every entity once; integers, checked exactly).
bool IsGrouping(const GroupingInput& in, const std::vector<Composition>& comps, const std::vector<uint32_t>& chosen) {
  uint64_t groups = 0;
  std::vector<uint64_t> used(in.types.size(), 0);
  for (size_t c = 0; c < comps.size(); ++c) {
    groups += chosen[c];
    for (size_t k = 0; k < in.types.size(); ++k) used[k] += static_cast<uint64_t>(chosen[c]) * comps[c].n[k];
  }
  for (size_t k = 0; k < in.types.size(); ++k) {
    if (used[k] != in.types[k].count) return false;
  }
  return groups == in.groups;
}

// CBC as plain branch and bound: no preprocessing, cuts or heuristics, which on these programs (thousands
// of columns, K + 1 rows) are most of its time. Still exact — the same feasibility and the same optimal
// value — but not necessarily the same one of several optimal solutions. A lean program still open after
// kLeanLimitS goes to the default CBC.
constexpr double kLeanLimitS = 5;
Result<MilpSolution> SolveLean(const GroupingInput& in, Milp p, Grouping* out) {
  p.set_preprocess(false);
  p.set_cuts(false);
  p.set_heuristics(false);
  const double limit = in.time_limit_s > 0 ? std::min(in.time_limit_s, kLeanLimitS) : kLeanLimitS;
  HETSIM_ASSIGN_OR_RETURN(MilpSolution s, p.Solve(limit));
  ++out->programs;
  out->nodes += s.nodes;
  out->seconds += s.seconds;
  return s;
}

// The binary search's question: is there a grouping with every E ≥ tau? The answer is the program's own
// whichever way CBC searches, so with `lean` it goes to SolveLean first (a yes checked exactly).
Result<bool> Feasible(const GroupingInput& in, const std::vector<Composition>& comps, double tau, bool lean,
                      Grouping* out) {
  Milp p(Milp::kMaximize);
  std::vector<int> g;
  if (!Build(in, comps, tau, false, &p, &g)) return false;
  if (lean) {
    HETSIM_ASSIGN_OR_RETURN(MilpSolution s, SolveLean(in, p, out));
    if (s.outcome == MilpSolution::kInfeasible) return false;
    if (s.has_solution() && IsGrouping(in, comps, Chosen(g, s))) return true;
  }
  HETSIM_ASSIGN_OR_RETURN(auto s, Run(in, p, out));
  return s.has_value();
}

// The grouping at the optimal level of largest Σ E, as CBC with its default settings picks it (the plans
// have always been those). Several groupings can tie (groups of equal stage counts can swap entities of
// one power), and which of them CBC returns depends on how it searches, so a lean CBC may not simply
// replace it. With `lean`: SolveLean finds an optimum g* of value V*, then for every composition n that g*
// uses, one lean feasibility program asks for a grouping with g_n ≤ g*_n − 1 and Σ E ≥ V* − margin. Every
// grouping other than g* has such an n (both have D groups), so if all are infeasible, g* is the only
// grouping within the margin of the optimum, and the default CBC — whose answer lies within its tolerances
// of the optimum (cutoff increment 1e-5, gaps 1e-9), far inside the margin — returns g* too. Otherwise (a
// tie, a program left open, or more than kMaxChecks compositions to check) the default CBC decides, as
// before.
Result<std::vector<uint32_t>> BestSum(const GroupingInput& in, const std::vector<Composition>& comps, double tau,
                                      bool lean, Grouping* out) {
  constexpr size_t kMaxChecks = 8;
  Milp p(Milp::kMaximize);
  std::vector<int> g;
  if (!Build(in, comps, tau, true, &p, &g)) return Status::Internal("autohet: eq. 3's optimal level has no composition");
  if (lean) {
    HETSIM_ASSIGN_OR_RETURN(MilpSolution s, SolveLean(in, p, out));
    const std::vector<uint32_t> chosen =
        s.has_solution() ? Chosen(g, s) : std::vector<uint32_t>(comps.size(), 0);
    if (s.outcome == MilpSolution::kOptimal && IsGrouping(in, comps, chosen)) {
      double value = 0;
      std::vector<size_t> used;
      for (size_t c = 0; c < comps.size(); ++c) {
        value += chosen[c] * comps[c].power;
        if (chosen[c] > 0) used.push_back(c);
      }
      const double margin = 1e-4 + 1e-5 * std::abs(value);
      bool unique = used.size() <= kMaxChecks;
      for (size_t i = 0; unique && i < used.size(); ++i) {
        Milp other(Milp::kMaximize);
        std::vector<int> h;
        Build(in, comps, tau, false, &other, &h);
        std::vector<std::pair<int, double>> sum;
        for (size_t c = 0; c < comps.size(); ++c) {
          if (h[c] >= 0) sum.push_back({h[c], comps[c].power});
        }
        other.AddRow(sum, value - margin, kMilpInf);
        other.SetBounds(h[used[i]], 0, chosen[used[i]] - 1.0);
        HETSIM_ASSIGN_OR_RETURN(MilpSolution alt, SolveLean(in, std::move(other), out));
        unique = alt.outcome == MilpSolution::kInfeasible;
      }
      if (unique) {
        ++out->proven_unique;
        out->proven_optimal = true;
        return chosen;
      }
    }
  }
  HETSIM_ASSIGN_OR_RETURN(auto s, Run(in, p, out));
  if (!s) return Status::Internal("autohet: eq. 3's grouping at its optimal level vanished");
  out->proven_optimal = s->outcome == MilpSolution::kOptimal;
  return Chosen(g, *s);
}

// Whether a composition is one of Compositions(in, s_max) with E ≥ tau.
bool Allowed(const GroupingInput& in, const std::vector<uint32_t>& n, uint32_t s_max, double tau) {
  uint32_t stages = 0;
  double mem = 0;
  for (size_t k = 0; k < n.size(); ++k) {
    stages += n[k];
    mem += n[k] * in.types[k].memory_gib;
  }
  return stages >= 1 && stages <= s_max && mem >= in.required_gib && EffectivePower(n, in.types, in.micro_batches) >= tau;
}

// A grouping with every E ≥ tau built outright, or false: every group gets ⌊N_k / D⌋ entities of each type,
// and the N_k mod D left over go one each to successive groups — continuing after the previous type's
// (spread) or from the first group for every type (stacked). Each try is a valid grouping, so `true` is
// exact; `false` decides nothing.
bool BuildOutright(const GroupingInput& in, uint32_t s_max, double tau) {
  const uint32_t D = in.groups;
  const size_t K = in.types.size();
  for (bool spread : {true, false}) {
    // Groups differ only by which types they got an extra of; check each distinct composition once.
    std::vector<std::vector<uint32_t>> extra(D, std::vector<uint32_t>(K, 0));
    uint32_t at = 0;
    for (size_t k = 0; k < K; ++k) {
      if (!spread) at = 0;
      for (uint32_t r = 0; r < in.types[k].count % D; ++r) {
        extra[at][k] = 1;
        at = (at + 1) % D;
      }
    }
    std::sort(extra.begin(), extra.end());
    extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
    bool ok = true;
    for (const auto& e : extra) {
      std::vector<uint32_t> n(K);
      for (size_t k = 0; k < K; ++k) n[k] = in.types[k].count / D + e[k];
      if (!Allowed(in, n, s_max, tau)) {
        ok = false;
        break;
      }
    }
    if (ok) return true;
  }
  return false;
}

// A grouping of at most two distinct compositions, found outright, or false: a·n + (D − a)·n' = N with n, n'
// allowed (E ≥ tau), tried for every allowed n and a = 1..D (the second composition is then determined).
// Each hit is a valid grouping, so `true` is exact; `false` decides nothing. On AutoHet's clusters the
// feasible questions that the balanced split (BuildOutright) misses mostly have such a grouping.
bool TwoCompositions(const GroupingInput& in, const std::vector<Composition>& comps, double tau) {
  const size_t K = in.types.size();
  // Compositions as mixed-radix numbers over 0..N_k per type; skip the screen where that overflows.
  std::vector<uint64_t> radix(K);
  uint64_t box = 1;
  for (size_t k = 0; k < K; ++k) {
    radix[k] = box;
    const uint64_t base = in.types[k].count + 1ull;
    if (box > (uint64_t{1} << 40) / base) return false;
    box *= base;
  }
  std::unordered_set<uint64_t> allowed;
  for (const auto& c : comps) {
    if (c.power < tau) continue;
    uint64_t key = 0;
    for (size_t k = 0; k < K; ++k) key += c.n[k] * radix[k];
    allowed.insert(key);
  }
  const uint32_t D = in.groups;
  std::vector<int64_t> rest(K);
  for (const auto& c : comps) {
    if (c.power < tau) continue;
    for (uint32_t a = 1; a <= D; ++a) {
      bool negative = false;
      for (size_t k = 0; k < K; ++k) {
        rest[k] = static_cast<int64_t>(in.types[k].count) - static_cast<int64_t>(a) * c.n[k];
        negative |= rest[k] < 0;
      }
      if (negative) break;
      const int64_t b = D - a;
      uint64_t key = 0;
      bool fits = true;
      for (size_t k = 0; k < K && fits; ++k) {
        if (b == 0) {
          fits = rest[k] == 0;
        } else {
          fits = rest[k] % b == 0;
          key += static_cast<uint64_t>(rest[k] / b) * radix[k];
        }
      }
      if (fits && (b == 0 || allowed.count(key) > 0)) return true;
    }
  }
  return false;
}

// For one or two GPU types: whether N / D (the average group) lies in the convex hull of the compositions
// with E ≥ tau. If it does not, not even the LP relaxation of the program (Σ g = D, Σ g·n = N, g ≥ 0) has a
// solution, so no grouping does. Exact integer arithmetic on D·p against N.
bool AverageInHull(const GroupingInput& in, const std::vector<Composition>& comps, double tau) {
  const int64_t D = in.groups;
  const size_t K = in.types.size();
  if (K == 1) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const auto& c : comps) {
      if (c.power < tau) continue;
      lo = std::min<int64_t>(lo, c.n[0]);
      hi = std::max<int64_t>(hi, c.n[0]);
    }
    const int64_t N = in.types[0].count;
    return lo <= hi && lo * D <= N && N <= hi * D;
  }
  using P = std::pair<int64_t, int64_t>;
  std::vector<P> pts;
  for (const auto& c : comps) {
    if (c.power >= tau) pts.emplace_back(c.n[0], c.n[1]);
  }
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  if (pts.empty()) return false;
  const P target{in.types[0].count, in.types[1].count};  // D × the average
  // (b − a) × (t − D·a) with a, b hull points scaled by D.
  auto cross = [&](const P& a, const P& b, const P& t) {
    return (b.first - a.first) * (t.second - D * a.second) - (b.second - a.second) * (t.first - D * a.first);
  };
  auto cross3 = [](const P& o, const P& a, const P& b) {
    return (a.first - o.first) * (b.second - o.second) - (a.second - o.second) * (b.first - o.first);
  };
  // Andrew's monotone chain: the hull counter-clockwise, collinear points dropped.
  std::vector<P> hull(2 * pts.size());
  size_t h = 0;
  for (size_t i = 0; i < pts.size(); ++i) {
    while (h >= 2 && cross3(hull[h - 2], hull[h - 1], pts[i]) <= 0) --h;
    hull[h++] = pts[i];
  }
  for (size_t i = pts.size() - 1, low = h + 1; i-- > 0;) {
    while (h >= low && cross3(hull[h - 2], hull[h - 1], pts[i]) <= 0) --h;
    hull[h++] = pts[i];
  }
  hull.resize(pts.size() == 1 ? 1 : h - 1);
  if (hull.size() == 1) return target.first == D * hull[0].first && target.second == D * hull[0].second;
  if (hull.size() == 2) {
    // A segment: collinear and between its ends.
    const P& a = hull[0];
    const P& b = hull[1];
    if (cross(a, b, target) != 0) return false;
    const int64_t dot = (target.first - D * a.first) * (b.first - a.first) + (target.second - D * a.second) * (b.second - a.second);
    const int64_t len = (b.first - a.first) * (b.first - a.first) + (b.second - a.second) * (b.second - a.second);
    return dot >= 0 && dot <= D * len;
  }
  for (size_t i = 0; i < hull.size(); ++i) {
    if (cross(hull[i], hull[(i + 1) % hull.size()], target) < 0) return false;
  }
  return true;
}

// For any number of GPU types: whether N / D lies within the allowed compositions' extent along a few
// directions w, D · min w·n ≤ w·N ≤ D · max w·n over the compositions with E ≥ tau. A grouping is D allowed
// compositions summing to N, so failing one bound proves that none exists (a partial convex-hull test;
// AverageInHull is the whole one for two types). The directions: each type, all of them (stages), the sum
// and the difference of every two, the memory, and the normal of E ≥ tau, which is linear in n
// (M·c·n − tau·|n| ≥ tau·(M − 1)). The integer ones are exact in doubles; the two real ones get a margin
// far above their rounding.
bool WithinBounds(const GroupingInput& in, const std::vector<Composition>& comps, double tau) {
  const size_t K = in.types.size();
  std::vector<std::vector<double>> dirs;
  for (size_t i = 0; i < K; ++i) {
    dirs.emplace_back(K, 0.0);
    dirs.back()[i] = 1;
  }
  dirs.emplace_back(K, 1.0);
  for (size_t i = 0; i < K; ++i) {
    for (size_t j = i + 1; j < K; ++j) {
      for (double sign : {1.0, -1.0}) {
        dirs.emplace_back(K, 0.0);
        dirs.back()[i] = 1;
        dirs.back()[j] = sign;
      }
    }
  }
  const size_t integer_dirs = dirs.size();
  dirs.emplace_back(K);
  dirs.emplace_back(K);
  for (size_t k = 0; k < K; ++k) {
    dirs[integer_dirs][k] = in.types[k].memory_gib;
    dirs[integer_dirs + 1][k] = in.micro_batches * in.types[k].power - tau;
  }
  std::vector<double> lo(dirs.size(), std::numeric_limits<double>::infinity());
  std::vector<double> hi(dirs.size(), -std::numeric_limits<double>::infinity());
  for (const auto& c : comps) {
    if (c.power < tau) continue;
    for (size_t d = 0; d < dirs.size(); ++d) {
      double v = 0;
      for (size_t k = 0; k < K; ++k) v += dirs[d][k] * c.n[k];
      lo[d] = std::min(lo[d], v);
      hi[d] = std::max(hi[d], v);
    }
  }
  const double D = in.groups;
  for (size_t d = 0; d < dirs.size(); ++d) {
    double target = 0, scale = 0;
    for (size_t k = 0; k < K; ++k) {
      target += dirs[d][k] * in.types[k].count;
      scale += std::abs(dirs[d][k]) * in.types[k].count;
    }
    const double margin = d < integer_dirs ? 0 : 1e-9 * (scale + 1) * D;
    if (target < D * lo[d] - margin || target > D * hi[d] + margin) return false;
  }
  return true;
}

}  // namespace

Result<std::optional<Grouping>> SolveGrouping(const GroupingInput& in) {
  const uint32_t D = in.groups;
  uint32_t entities = 0;
  for (const auto& t : in.types) entities += t.count;
  if (D == 0 || D > entities) return std::optional<Grouping>{};
  // A group has between 1 and E − (D − 1) stages, and no more than the model has blocks.
  const uint32_t s_max = std::min(entities - (D - 1), std::max<uint32_t>(1, in.max_stages));
  if (static_cast<uint64_t>(s_max) * D < entities) return std::optional<Grouping>{};  // 3e cannot hold
  const std::vector<Composition> comps = Compositions(in, s_max);
  std::vector<double> levels;
  for (const auto& c : comps) levels.push_back(c.power);
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  Grouping out;
  const bool hull = in.screen && in.types.size() <= 2;
  auto feasible = [&](double tau) -> Result<bool> {
    if (in.screen && BuildOutright(in, s_max, tau)) {
      ++out.screened;
      return true;
    }
    if ((hull && !AverageInHull(in, comps, tau)) || (in.screen && !WithinBounds(in, comps, tau))) {
      ++out.screened;
      return false;
    }
    if (in.screen && TwoCompositions(in, comps, tau)) {
      ++out.screened;
      return true;
    }
    return Feasible(in, comps, tau, in.screen, &out);
  };
  if (levels.empty()) return std::optional<Grouping>{};
  HETSIM_ASSIGN_OR_RETURN(bool any, feasible(levels.front()));
  if (!any) return std::optional<Grouping>{};
  // Largest feasible level: levels[lo] feasible, levels[hi] (if < size) not.
  size_t lo = 0, hi = levels.size();
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    HETSIM_ASSIGN_OR_RETURN(bool ok, feasible(levels[mid]));
    (ok ? lo : hi) = mid;
  }
  HETSIM_ASSIGN_OR_RETURN(const std::vector<uint32_t> pick, BestSum(in, comps, levels[lo], in.screen, &out));
  // Groups in descending effective power (then composition) order: deterministic.
  std::vector<size_t> order;
  for (size_t c = 0; c < comps.size(); ++c) order.insert(order.end(), pick[c], c);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return comps[a].power > comps[b].power; });
  for (size_t c : order) out.counts.push_back(comps[c].n);
  out.min_power = levels[lo];
  out.objective = D * out.min_power;
  out.compositions = comps.size();
  return std::optional<Grouping>(std::move(out));
}

}  // namespace hetsim::planners::autohet
