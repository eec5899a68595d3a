#include "executor/cpu_backend.h"

#include <malloc.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>

#include "executor/init.h"

namespace hetsim::executor {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapM = Eigen::Map<RowMat>;
using CMapM = Eigen::Map<const RowMat>;
using StridedM = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

MapM M(Tensor t) { return MapM(t.ptr<float>(), t.rows, t.cols); }
// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of a row-major tensor.
StridedM Block(Tensor t, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  return StridedM(t.ptr<float>() + row0 * t.cols + col0, rows, cols, Eigen::OuterStride<>(t.cols));
}

void CheckF32(const Tensor& t, const char* what) {
  HETSIM_CHECK(t.dtype == DType::kF32, std::string("cpu backend: ") + what + " must be f32");
}

// A slower CPU worker (rank_kinds.h): each kernel is followed by a pause of (slowdown - 1) times its duration
// during which the rank keeps its core (a core of 1/slowdown the speed would be busy that long). Kernels that
// call kernels are paced once, by the outermost; slowdown 1 costs one branch.
class Pace {
 public:
  explicit Pace(double slowdown) : slowdown_(depth_++ == 0 ? slowdown : 1) {
    if (slowdown_ > 1) start_ = std::chrono::steady_clock::now();
  }
  ~Pace() {
    --depth_;
    if (slowdown_ <= 1) return;
    const auto now = std::chrono::steady_clock::now();
    Hold(now + std::chrono::duration_cast<std::chrono::steady_clock::duration>((now - start_) * (slowdown_ - 1)));
  }
  Pace(const Pace&) = delete;
  Pace& operator=(const Pace&) = delete;

 private:
  // Sleeps through most of the pause (the machine's other ranks may use the CPU; under a pool of cores this
  // rank's ticket keeps its core) and spins through the last 100 us, which a sleep would overshoot.
  static void Hold(std::chrono::steady_clock::time_point until) {
    const auto spin = std::chrono::microseconds(100);
    if (until - std::chrono::steady_clock::now() > 2 * spin) std::this_thread::sleep_until(until - spin);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  double slowdown_;
  std::chrono::steady_clock::time_point start_;
  static thread_local int depth_;
};

thread_local int Pace::depth_ = 0;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(double slowdown) : slowdown_(slowdown), origin_(std::chrono::steady_clock::now()) {}
  ~CpuBackend() override {
    if (side_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      side_wake_.notify_all();
      side_.join();
    }
    for (auto& [p, n] : sizes_) ::operator delete(p, std::align_val_t(64));
  }

  std::string name() const override { return "cpu"; }
  DType act_dtype() const override { return DType::kF32; }

  Tensor Alloc(int64_t rows, int64_t cols, DType dtype) override {
    HETSIM_CHECK(dtype != DType::kBF16, "cpu backend: bf16 tensors are not supported");
    Tensor t{nullptr, rows, cols, dtype};
    const size_t n = std::max<size_t>(t.bytes(), 64);
    t.data = ::operator new(n, std::align_val_t(64));
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[t.data] = n;
    in_use_ += n;
    peak_ = std::max(peak_, in_use_);
    return t;
  }
  void Free(Tensor t) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(t.data);
    HETSIM_CHECK(it != sizes_.end(), "cpu backend: Free of memory it did not allocate");
    in_use_ -= it->second;
    ::operator delete(t.data, std::align_val_t(64));
    sizes_.erase(it);
  }
  size_t bytes_in_use() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
  }
  size_t peak_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  void ResetPeak() override {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = in_use_;
  }

  void Upload(Tensor dst, const void* host) override { std::memcpy(dst.data, host, dst.bytes()); }
  void Download(void* host, Tensor src) override { std::memcpy(host, src.data, src.bytes()); }
  void Fill(Tensor t, float value) override {
    CheckF32(t, "Fill");
    std::fill_n(t.ptr<float>(), t.numel(), value);
  }
  void Copy(Tensor dst, Tensor src) override {
    HETSIM_CHECK(dst.numel() == src.numel() && dst.dtype == src.dtype, "cpu backend: Copy shape or dtype mismatch");
    if (dst.data != src.data) std::memmove(dst.data, src.data, dst.bytes());
  }
  void CopyColumns(Tensor dst, int64_t dst_col, Tensor src, int64_t src_col, int64_t cols) override {
    HETSIM_CHECK(dst.rows == src.rows && dst.dtype == src.dtype && dst_col + cols <= dst.cols &&
                     src_col + cols <= src.cols,
                 "cpu backend: CopyColumns shape mismatch");
    const size_t e = DTypeSize(dst.dtype);
    auto* d = static_cast<char*>(dst.data);
    const auto* s = static_cast<const char*>(src.data);
    for (int64_t r = 0; r < dst.rows; ++r) {
      std::memcpy(d + (r * dst.cols + dst_col) * e, s + (r * src.cols + src_col) * e, static_cast<size_t>(cols) * e);
    }
  }
  void GatherRows(Tensor dst, Tensor src, const std::vector<int64_t>& index, const std::vector<float>& scale) override {
    const Pace pace(slowdown_);
    CheckF32(dst, "GatherRows");
    HETSIM_CHECK(src.dtype == dst.dtype && src.cols == dst.cols && static_cast<int64_t>(index.size()) == dst.rows &&
                     (scale.empty() || scale.size() == index.size()),
                 "cpu backend: GatherRows shape mismatch");
    const int64_t w = dst.cols;
    for (int64_t i = 0; i < dst.rows; ++i) {
      float* d = dst.ptr<float>() + i * w;
      const int64_t r = index[static_cast<size_t>(i)];
      if (r < 0) {
        std::fill_n(d, w, 0.0f);
        continue;
      }
      HETSIM_CHECK(r < src.rows, "cpu backend: GatherRows index out of range");
      const float* s = src.ptr<float>() + r * w;
      const float a = scale.empty() ? 1.0f : scale[static_cast<size_t>(i)];
      for (int64_t c = 0; c < w; ++c) d[c] = a * s[c];
    }
  }
  void ScatterAddRows(Tensor dst, Tensor src, const std::vector<int64_t>& index,
                      const std::vector<float>& scale) override {
    const Pace pace(slowdown_);
    CheckF32(dst, "ScatterAddRows");
    HETSIM_CHECK(src.dtype == dst.dtype && src.cols == dst.cols && static_cast<int64_t>(index.size()) == src.rows &&
                     (scale.empty() || scale.size() == index.size()),
                 "cpu backend: ScatterAddRows shape mismatch");
    const int64_t w = dst.cols;
    for (int64_t i = 0; i < src.rows; ++i) {
      const int64_t r = index[static_cast<size_t>(i)];
      if (r < 0) continue;
      HETSIM_CHECK(r < dst.rows, "cpu backend: ScatterAddRows index out of range");
      float* d = dst.ptr<float>() + r * w;
      const float* s = src.ptr<float>() + i * w;
      const float a = scale.empty() ? 1.0f : scale[static_cast<size_t>(i)];
      for (int64_t c = 0; c < w; ++c) d[c] += a * s[c];
    }
  }
  void RowDots(Tensor out, Tensor a, Tensor b) override {
    const Pace pace(slowdown_);
    CheckF32(out, "RowDots");
    CheckF32(a, "RowDots");
    HETSIM_CHECK(a.rows == b.rows && a.cols == b.cols && b.dtype == a.dtype && out.numel() == a.rows,
                 "cpu backend: RowDots shape mismatch");
    for (int64_t i = 0; i < a.rows; ++i) {
      const float *x = a.ptr<float>() + i * a.cols, *y = b.ptr<float>() + i * a.cols;
      float sum = 0;
      for (int64_t c = 0; c < a.cols; ++c) sum += x[c] * y[c];
      out.ptr<float>()[i] = sum;
    }
  }
  void Add(Tensor y, Tensor x) override {
    const Pace pace(slowdown_);
    CheckF32(y, "Add");
    HETSIM_CHECK(y.numel() == x.numel(), "cpu backend: Add size mismatch");
    float* py = y.ptr<float>();
    const float* px = x.ptr<float>();
    for (int64_t i = 0; i < y.numel(); ++i) py[i] += px[i];
  }
  void Scale(Tensor t, float alpha) override {
    const Pace pace(slowdown_);
    float* p = t.ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= alpha;
  }

  void Gemm(Tensor c, Tensor a, bool ta, Tensor b, bool tb, float alpha, float beta) override {
    const Pace pace(slowdown_);
    CheckF32(a, "Gemm a");
    CheckF32(b, "Gemm b");
    CheckF32(c, "Gemm c");
    const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
    const int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
    HETSIM_CHECK(k == kb && c.rows == m && c.cols == n,
                 "cpu backend: Gemm shapes [" + std::to_string(m) + "x" + std::to_string(k) + "]·[" +
                     std::to_string(kb) + "x" + std::to_string(n) + "] -> [" + std::to_string(c.rows) + "x" +
                     std::to_string(c.cols) + "]");
    CMapM A(a.ptr<float>(), a.rows, a.cols), B(b.ptr<float>(), b.rows, b.cols);
    MapM C = M(c);
    auto run = [&](const auto& opa, const auto& opb) {
      if (beta == 0.0f) {
        C.noalias() = alpha * (opa * opb);
      } else {
        if (beta != 1.0f) C *= beta;
        C.noalias() += alpha * (opa * opb);
      }
    };
    if (!ta && !tb) run(A, B);
    else if (ta && !tb) run(A.transpose(), B);
    else if (!ta && tb) run(A, B.transpose());
    else run(A.transpose(), B.transpose());
    Progress();
  }

  void Embedding(Tensor out, Tensor tokens, Tensor table, int64_t vocab_begin) override {
    const Pace pace(slowdown_);
    const int32_t* tok = tokens.ptr<int32_t>();
    for (int64_t t = 0; t < out.rows; ++t) {
      const int64_t row = tok[t] - vocab_begin;
      float* o = out.ptr<float>() + t * out.cols;
      if (row >= 0 && row < table.rows) {
        std::memcpy(o, table.ptr<float>() + row * table.cols, sizeof(float) * static_cast<size_t>(out.cols));
      } else {
        std::fill_n(o, out.cols, 0.0f);
      }
    }
  }
  void EmbeddingBackward(Tensor grad_table, Tensor tokens, Tensor dout, int64_t vocab_begin) override {
    const Pace pace(slowdown_);
    const int32_t* tok = tokens.ptr<int32_t>();
    for (int64_t t = 0; t < dout.rows; ++t) {
      const int64_t row = tok[t] - vocab_begin;
      if (row < 0 || row >= grad_table.rows) continue;
      float* g = grad_table.ptr<float>() + row * grad_table.cols;
      const float* d = dout.ptr<float>() + t * dout.cols;
      for (int64_t j = 0; j < dout.cols; ++j) g[j] += d[j];
    }
  }

  void RmsNorm(Tensor out, Tensor inv_rms, Tensor x, Tensor w, float eps) override {
    const Pace pace(slowdown_);
    const int64_t n = x.cols;
    for (int64_t t = 0; t < x.rows; ++t) {
      const float* xr = x.ptr<float>() + t * n;
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double(xr[j]) * xr[j];
      const float r = static_cast<float>(1.0 / std::sqrt(ss / double(n) + eps));
      inv_rms.ptr<float>()[t] = r;
      float* o = out.ptr<float>() + t * n;
      for (int64_t j = 0; j < n; ++j) o[j] = xr[j] * r * w.ptr<float>()[j];
    }
  }
  void RmsNormBackward(Tensor dx, Tensor grad_w, Tensor x, Tensor w, Tensor inv_rms, Tensor dout,
                       bool accumulate_dx) override {
    const Pace pace(slowdown_);
    const int64_t n = x.cols;
    const float* pw = w.ptr<float>();
    float* gw = grad_w.ptr<float>();
    for (int64_t t = 0; t < x.rows; ++t) {
      const float* xr = x.ptr<float>() + t * n;
      const float* dy = dout.ptr<float>() + t * n;
      const float r = inv_rms.ptr<float>()[t];
      // n̂ = x·r, y = n̂ ⊙ w:  dx = r · (g − n̂ · mean(g ⊙ n̂)) with g = dy ⊙ w.
      double dot = 0;
      for (int64_t j = 0; j < n; ++j) dot += double(dy[j]) * pw[j] * xr[j] * r;
      const float mean = static_cast<float>(dot / double(n));
      float* o = dx.ptr<float>() + t * n;
      for (int64_t j = 0; j < n; ++j) {
        const float nh = xr[j] * r;
        gw[j] += dy[j] * nh;
        const float v = r * (dy[j] * pw[j] - nh * mean);
        o[j] = accumulate_dx ? o[j] + v : v;
      }
    }
  }

  void Rope(Tensor x, int64_t seq, int64_t heads, int64_t head_dim, float theta, bool inverse) override {
    const Pace pace(slowdown_);
    const int64_t half = head_dim / 2;
    std::vector<float> cs(static_cast<size_t>(seq * half)), sn(cs.size());
    for (int64_t p = 0; p < seq; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(p) * std::pow(double(theta), -2.0 * double(i) / double(head_dim));
        cs[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
        sn[static_cast<size_t>(p * half + i)] = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
      }
    }
    for (int64_t t = 0; t < x.rows; ++t) {
      const int64_t p = t % seq;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x.ptr<float>() + t * x.cols + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[static_cast<size_t>(p * half + i)], s = sn[static_cast<size_t>(p * half + i)];
          const float a = v[i], b = v[i + half];
          v[i] = a * c - b * s;
          v[i + half] = a * s + b * c;
        }
      }
    }
  }

  void SetProgressHook(std::function<void()> hook) override { progress_ = std::move(hook); }

  // Per sequence, query head and live row range [r0, r0 + n): the scores against the causal prefix of
  // keys [0, r0 + n), the causal softmax, the output; rows outside the live ranges (context parallelism's
  // other chunks) get a zero output and are left out of the probabilities.
  void Attention(Tensor out, Tensor probs, Tensor q, Tensor k, Tensor v, const AttentionShape& s) override {
    const Pace pace(slowdown_);
    Progress();
    const int64_t group = s.q_heads / s.kv_heads, S = s.seq, hd = s.head_dim;
    const auto live = s.live_rows();
    if (s.cp > 1) M(out).setZero();
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.q_heads; ++h) {
        const int64_t kvh = h / group;
        float* p = probs.ptr<float>() + (b * s.q_heads + h) * S * S;
        for (const auto& [r0, n] : live) {
          const int64_t keys = r0 + n;
          auto Q = Block(q, b * S + r0, n, h * hd, hd);
          auto K = Block(k, b * S, keys, kvh * hd, hd);
          auto V = Block(v, b * S, keys, kvh * hd, hd);
          StridedM P(p + r0 * S, n, keys, Eigen::OuterStride<>(S));
          P.noalias() = s.scale * (Q * K.transpose());
          for (int64_t i = 0; i < n; ++i) {
            float* row = p + (r0 + i) * S;
            const int64_t last = r0 + i;  // causal: keys 0..last
            float mx = row[0];
            for (int64_t j = 1; j <= last; ++j) mx = std::max(mx, row[j]);
            double sum = 0;
            for (int64_t j = 0; j <= last; ++j) {
              row[j] = std::exp(row[j] - mx);
              sum += row[j];
            }
            const float inv = static_cast<float>(1.0 / sum);
            for (int64_t j = 0; j <= last; ++j) row[j] *= inv;
            for (int64_t j = last + 1; j < S; ++j) row[j] = 0.0f;
          }
          Block(out, b * S + r0, n, h * hd, hd).noalias() = P * V;
        }
      }
    }
  }
  void AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v, Tensor probs,
                         const AttentionShape& s) override {
    const Pace pace(slowdown_);
    const int64_t group = s.q_heads / s.kv_heads, S = s.seq, hd = s.head_dim;
    const auto live = s.live_rows();
    M(dk).setZero();
    M(dv).setZero();
    if (s.cp > 1) M(dq).setZero();
    RowMat dP;
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.q_heads; ++h) {
        const int64_t kvh = h / group;
        const float* p = probs.ptr<float>() + (b * s.q_heads + h) * S * S;
        for (const auto& [r0, n] : live) {
          const int64_t keys = r0 + n;
          auto Q = Block(q, b * S + r0, n, h * hd, hd);
          auto K = Block(k, b * S, keys, kvh * hd, hd);
          auto V = Block(v, b * S, keys, kvh * hd, hd);
          auto dO = Block(dout, b * S + r0, n, h * hd, hd);
          Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> P(p + r0 * S, n, keys, Eigen::OuterStride<>(S));
          Block(dv, b * S, keys, kvh * hd, hd).noalias() += P.transpose() * dO;
          dP.noalias() = dO * V.transpose();
          for (int64_t i = 0; i < n; ++i) {
            const int64_t last = r0 + i;
            double dot = 0;
            for (int64_t j = 0; j <= last; ++j) dot += double(P(i, j)) * dP(i, j);
            for (int64_t j = 0; j < keys; ++j) {
              dP(i, j) = j <= last ? P(i, j) * (dP(i, j) - static_cast<float>(dot)) : 0.0f;
            }
          }
          Block(dq, b * S + r0, n, h * hd, hd).noalias() = s.scale * (dP * K);
          Block(dk, b * S, keys, kvh * hd, hd).noalias() += s.scale * (dP.transpose() * Q);
        }
      }
    }
  }

  void SwiGlu(Tensor out, Tensor gate, Tensor up) override {
    const Pace pace(slowdown_);
    const float *g = gate.ptr<float>(), *u = up.ptr<float>();
    float* o = out.ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
  void SwiGluBackward(Tensor dgate, Tensor dup, Tensor gate, Tensor up, Tensor dout) override {
    const Pace pace(slowdown_);
    const float *g = gate.ptr<float>(), *u = up.ptr<float>(), *d = dout.ptr<float>();
    for (int64_t i = 0; i < dout.numel(); ++i) {
      const float sig = 1.0f / (1.0f + std::exp(-g[i]));
      const float silu = g[i] * sig;
      dup.ptr<float>()[i] = d[i] * silu;
      dgate.ptr<float>()[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    }
  }

  void CrossEntropyMax(Tensor row_max, Tensor logits) override {
    const Pace pace(slowdown_);
    for (int64_t t = 0; t < logits.rows; ++t) {
      const float* l = logits.ptr<float>() + t * logits.cols;
      row_max.ptr<float>()[t] = *std::max_element(l, l + logits.cols);
    }
  }
  void CrossEntropySums(Tensor sums, Tensor row_max, Tensor logits, Tensor labels, int64_t vocab_begin) override {
    const Pace pace(slowdown_);
    for (int64_t t = 0; t < logits.rows; ++t) {
      const float* l = logits.ptr<float>() + t * logits.cols;
      const float mx = row_max.ptr<float>()[t];
      double se = 0;
      for (int64_t j = 0; j < logits.cols; ++j) se += std::exp(double(l[j]) - mx);
      const int64_t target = labels.ptr<int32_t>()[t] - vocab_begin;
      sums.ptr<float>()[2 * t] = static_cast<float>(se);
      sums.ptr<float>()[2 * t + 1] = target >= 0 && target < logits.cols ? l[target] : 0.0f;
    }
  }
  void CrossEntropyFinish(Tensor logits, Tensor loss, Tensor row_max, Tensor sums, Tensor labels,
                          int64_t vocab_begin, float grad_scale, bool add_loss) override {
    const Pace pace(slowdown_);
    double total = 0;
    for (int64_t t = 0; t < logits.rows; ++t) {
      float* l = logits.ptr<float>() + t * logits.cols;
      const float mx = row_max.ptr<float>()[t];
      const float se = sums.ptr<float>()[2 * t], target_logit = sums.ptr<float>()[2 * t + 1];
      total += std::log(double(se)) + mx - target_logit;
      const float inv = 1.0f / se;
      for (int64_t j = 0; j < logits.cols; ++j) l[j] = grad_scale * std::exp(l[j] - mx) * inv;
      const int64_t target = labels.ptr<int32_t>()[t] - vocab_begin;
      if (target >= 0 && target < logits.cols) l[target] -= grad_scale;
    }
    if (add_loss) loss.ptr<float>()[0] += static_cast<float>(total);
  }

  void InitParam(Tensor t, uint64_t seed, uint64_t tensor_id, int64_t row_begin, float std_dev) override {
    CheckF32(t, "InitParam");
    for (int64_t i = 0; i < t.rows; ++i) {
      for (int64_t j = 0; j < t.cols; ++j) t.ptr<float>()[i * t.cols + j] = InitValue(seed, tensor_id, row_begin + i, j, std_dev);
    }
  }
  void Adam(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor weight, const AdamParams& a) override {
    const Pace pace(slowdown_);
    const float c1 = 1.0f - std::pow(a.beta1, float(a.step)), c2 = 1.0f - std::pow(a.beta2, float(a.step));
    float *p = param.ptr<float>(), *pm = m.ptr<float>(), *pv = v.ptr<float>();
    const float* g = grad.ptr<float>();
    for (int64_t i = 0; i < param.numel(); ++i) {
      pm[i] = a.beta1 * pm[i] + (1.0f - a.beta1) * g[i];
      pv[i] = a.beta2 * pv[i] + (1.0f - a.beta2) * g[i] * g[i];
      p[i] -= a.lr * (pm[i] / c1) / (std::sqrt(pv[i] / c2) + a.eps);
    }
    if (!weight.empty() && weight.data != param.data) Copy(weight, param);
  }

  void Synchronize() override {}
  Mark Record() override {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
    std::lock_guard<std::mutex> lock(mu_);
    marks_.push_back(now);
    return static_cast<Mark>(marks_.size() - 1);
  }
  double Elapsed(Mark from, Mark to) override {
    std::lock_guard<std::mutex> lock(mu_);
    return marks_.at(to) - marks_.at(from);
  }
  void ClearMarks() override {
    std::lock_guard<std::mutex> lock(mu_);
    marks_.clear();
  }

  // One worker thread runs the side stream's work in order; the compute thread goes on meanwhile.
  void SideSubmit(std::function<void()> work) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!side_.joinable()) side_ = std::thread([this] { SideLoop(); });
      side_queue_.push_back(std::move(work));
      ++side_pending_;
    }
    side_wake_.notify_all();
  }
  void SideJoin() override {
    std::unique_lock<std::mutex> lock(mu_);
    side_idle_.wait(lock, [this] { return side_pending_ == 0; });
  }

 private:
  // The pipeline's MPI requests belong to the compute thread: the worker never progresses them.
  void Progress() {
    if (progress_ && !on_side_thread_) progress_();
  }
  void SideLoop() {
    on_side_thread_ = true;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      side_wake_.wait(lock, [this] { return stop_ || !side_queue_.empty(); });
      if (side_queue_.empty()) return;  // stop_
      std::function<void()> work = std::move(side_queue_.front());
      side_queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
      if (--side_pending_ == 0) side_idle_.notify_all();
    }
  }

  double slowdown_;                  // Pace
  std::function<void()> progress_;  // SetProgressHook
  // Guards the allocation table, the marks and the side queue (the side stream's worker allocates and
  // records too).
  mutable std::mutex mu_;
  std::thread side_;
  std::deque<std::function<void()>> side_queue_;
  size_t side_pending_ = 0;  // submitted work not yet finished
  bool stop_ = false;
  std::condition_variable side_wake_, side_idle_;
  static thread_local bool on_side_thread_;
  std::unordered_map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
  std::chrono::steady_clock::time_point origin_;
  std::vector<double> marks_;
};

thread_local bool CpuBackend::on_side_thread_ = false;

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(double slowdown) {
  // Keep freed memory in the process, as GPU frameworks' caching allocators do: by default glibc maps
  // every block over 128 KiB afresh and returns it on free, so each step's gradient-sync buffer and
  // activations would page-fault in again (about 4x the time of the all-reduce they feed, measured).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  HETSIM_CHECK(slowdown >= 1, "MakeCpuBackend: slowdown " + std::to_string(slowdown) + " < 1");
  return std::make_unique<CpuBackend>(slowdown);
}

}  // namespace hetsim::executor
