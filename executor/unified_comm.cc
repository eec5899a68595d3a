#include "executor/unified_comm.h"

#include <mpi.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "executor/mpi_comm.h"
#include "executor/mpi_util.h"

namespace hetsim::executor {
namespace {

class HostStagedComm final : public Comm {
 public:
  HostStagedComm(Backend* be, std::unique_ptr<Comm> host) : be_(be), host_(std::move(host)) {}
  int size() const override { return host_->size(); }
  int rank() const override { return host_->rank(); }
  void AllReduce(Tensor t, ReduceOp op) override {
    const Tensor h = Down(t, &a_);
    host_->AllReduce(h, op);
    be_->Upload(t, h.data);
  }
  void ReduceScatter(Tensor in, Tensor out) override {
    const Tensor h = Down(in, &a_), o = HostLike(out, &b_);
    host_->ReduceScatter(h, o);
    be_->Upload(out, o.data);
  }
  void AllGather(Tensor in, Tensor out) override {
    const Tensor h = Down(in, &a_), o = HostLike(out, &b_);
    host_->AllGather(h, o);
    be_->Upload(out, o.data);
  }
  void AllToAll(Tensor in, Tensor out) override {
    const Tensor h = Down(in, &a_), o = HostLike(out, &b_);
    host_->AllToAll(h, o);
    be_->Upload(out, o.data);
  }
  void Broadcast(Tensor t, int root) override {
    const Tensor h = rank() == root ? Down(t, &a_) : HostLike(t, &a_);
    host_->Broadcast(h, root);
    if (rank() != root) be_->Upload(t, h.data);
  }
  void SendRecv(Tensor send, int dst, Tensor recv, int src) override {
    const Tensor h = Down(send, &a_), o = HostLike(recv, &b_);
    host_->SendRecv(h, dst, o, src);
    be_->Upload(recv, o.data);
  }

 private:
  // A host buffer shaped like `t` (f32: what MPI reduces).
  static Tensor HostLike(Tensor t, std::vector<float>* buf) {
    HETSIM_CHECK(t.dtype == DType::kF32, std::string("the unified communicator carries f32 tensors, not ") +
                                             DTypeName(t.dtype) + " (a job of several kinds trains in fp32)");
    buf->resize(static_cast<size_t>(t.numel()));
    return {buf->data(), t.rows, t.cols, t.dtype};
  }
  // The device tensor copied into host memory (the CPU path's first copy; waits for the producing kernels).
  Tensor Down(Tensor t, std::vector<float>* buf) {
    const Tensor h = HostLike(t, buf);
    be_->Download(h.data, t);
    return h;
  }
  Backend* be_;
  std::unique_ptr<Comm> host_;
  std::vector<float> a_, b_;
};

// Pipeline messages by peer: those of mixed channels through host memory, the others on the backend's own path.
// MPI's pipeline paths each duplicate MPI_COMM_WORLD, which every rank must do in one order whatever its
// backend: so every rank of a job with CPU ranks holds the MPI path (a CUDA rank leaves it unused), every rank of
// a job with a mixed channel the staged path, and they are made and freed in that order on every rank.
struct RoutedPeerToPeer final : public PeerToPeer {
  void Send(int peer, Tensor t, int tag) override { For(peer).Send(peer, t, tag); }
  void WaitForMessage(int peer, int tag) override { For(peer).WaitForMessage(peer, tag); }
  void Recv(int peer, Tensor t, int tag) override { For(peer).Recv(peer, t, tag); }
  void PostRecv(int peer, Tensor t, int tag) override { For(peer).PostRecv(peer, t, tag); }
  void WaitSends() override {
    for (PeerToPeer* p : {native, staged.get()}) {
      if (p != nullptr) p->WaitSends();
    }
  }
  void Progress() override {
    for (PeerToPeer* p : {native, staged.get()}) {
      if (p != nullptr) p->Progress();
    }
  }
  PeerToPeer& For(int peer) {
    PeerToPeer* p = staged_peers.count(peer) != 0 ? staged.get() : native;
    HETSIM_CHECK(p != nullptr, "no pipeline path to rank " + std::to_string(peer));
    return *p;
  }

  // Declared in the order of making; members are freed in reverse, the same on every rank.
  std::unique_ptr<PeerToPeer> mpi;     // the CPU ranks' own path
  std::unique_ptr<PeerToPeer> staged;  // host memory + MPI (mixed channels)
  std::unique_ptr<PeerToPeer> nccl;    // the CUDA ranks' own path
  PeerToPeer* native = nullptr;        // mpi or nccl: this rank's own path
  std::set<int> staged_peers;
};

class UnifiedCommFactory final : public CommFactory {
 public:
  UnifiedCommFactory(Backend* be, std::unique_ptr<CommFactory> native, const RankKinds* kinds)
      : be_(be), native_(std::move(native)), host_(MakeMpiCommFactory()), kinds_(kinds) {
    HETSIM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me_));
  }
  std::unique_ptr<Comm> CreateGroup(const std::vector<int>& ranks, int index) override {
    if (!kinds_->Mixed(ranks)) return native_->CreateGroup(ranks, index);
    return MakeHostStagedComm(be_, host_->CreateGroup(ranks, index));
  }
  std::unique_ptr<PeerToPeer> CreatePeerToPeer(const std::vector<std::pair<int, int>>& channels) override {
    auto p = std::make_unique<RoutedPeerToPeer>();
    std::vector<std::pair<int, int>> own;
    bool any_mixed = false;
    for (const auto& [from, to] : channels) {
      const bool mixed = kinds_->Mixed({from, to});
      any_mixed = any_mixed || mixed;
      if (!mixed) own.emplace_back(from, to);
      if (mixed && (from == me_ || to == me_)) p->staged_peers.insert(from == me_ ? to : from);
    }
    if (kinds_->has(BackendKind::kCpu)) p->mpi = host_->CreatePeerToPeer(own);
    if (any_mixed) p->staged = MakeStagedPeerToPeer(be_);
    // Every CUDA rank passes the same list of one-kind channels (NCCL initialises each with its two ranks).
    if (kinds_->of(me_).backend == BackendKind::kCuda) p->nccl = native_->CreatePeerToPeer(own);
    p->native = p->nccl != nullptr ? p->nccl.get() : p->mpi.get();
    return p;
  }

 private:
  Backend* be_;
  std::unique_ptr<CommFactory> native_, host_;
  const RankKinds* kinds_;
  int me_ = 0;
};

}  // namespace

std::unique_ptr<Comm> MakeHostStagedComm(Backend* backend, std::unique_ptr<Comm> host) {
  return std::make_unique<HostStagedComm>(backend, std::move(host));
}

std::unique_ptr<CommFactory> MakeUnifiedCommFactory(Backend* backend, std::unique_ptr<CommFactory> native,
                                                    const RankKinds* kinds) {
  return std::make_unique<UnifiedCommFactory>(backend, std::move(native), kinds);
}

}  // namespace hetsim::executor
