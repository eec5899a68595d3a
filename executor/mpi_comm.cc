#include "executor/mpi_comm.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include "executor/mpi_util.h"

namespace hetsim::executor {
std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

int WorldRank() {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void FatalError(const char* file, int line, const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "hetsim-exec: host %s rank %d: %s:%d: %s failed: %s\n", HostName().c_str(), WorldRank(),
               file, line, what.c_str(), detail.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

std::string MpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

namespace {

MPI_Datatype MpiType(const Tensor& t) {
  HETSIM_CHECK(t.dtype == DType::kF32, "MPI communication carries f32 tensors only");
  return MPI_FLOAT;
}

class MpiComm final : public Comm {
 public:
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    HETSIM_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    HETSIM_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  }
  ~MpiComm() override { MPI_Comm_free(&comm_); }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void AllReduce(Tensor t, ReduceOp op) override {
    HETSIM_CHECK(t.numel() <= INT32_MAX, "MPI all-reduce of more than 2^31 elements");
    HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data, static_cast<int>(t.numel()), MpiType(t),
                                   op == ReduceOp::kSum ? MPI_SUM : MPI_MAX, comm_));
  }
  void ReduceScatter(Tensor in, Tensor out) override {
    HETSIM_CHECK(out.numel() * size_ == in.numel() && out.numel() <= INT32_MAX, "MPI reduce-scatter: bad segment");
    HETSIM_MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, static_cast<int>(out.numel()), MpiType(in), MPI_SUM,
                                              comm_));
  }
  void Broadcast(Tensor t, int root) override {
    HETSIM_CHECK(t.numel() <= INT32_MAX, "MPI broadcast of more than 2^31 elements");
    HETSIM_MPI_CHECK(MPI_Bcast(t.data, static_cast<int>(t.numel()), MpiType(t), root, comm_));
  }
  void AllToAll(Tensor in, Tensor out) override {
    HETSIM_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0 && in.numel() / size_ <= INT32_MAX,
                 "MPI all-to-all: bad blocks");
    const int n = static_cast<int>(in.numel() / size_);
    HETSIM_MPI_CHECK(MPI_Alltoall(in.data, n, MpiType(in), out.data, n, MpiType(out), comm_));
  }
  void SendRecv(Tensor send, int dst, Tensor recv, int src) override {
    HETSIM_CHECK(send.numel() <= INT32_MAX && recv.numel() <= INT32_MAX && dst >= 0 && dst < size_ && src >= 0 &&
                     src < size_,
                 "MPI ring step: bad tensors or peers");
    HETSIM_MPI_CHECK(MPI_Sendrecv(send.data, static_cast<int>(send.numel()), MpiType(send), dst, 0, recv.data,
                                  static_cast<int>(recv.numel()), MpiType(recv), src, 0, comm_, MPI_STATUS_IGNORE));
  }
  void AllGather(Tensor in, Tensor out) override {
    HETSIM_CHECK(in.numel() * size_ == out.numel() && in.numel() <= INT32_MAX, "MPI all-gather: bad segment");
    HETSIM_MPI_CHECK(MPI_Allgather(in.data, static_cast<int>(in.numel()), MpiType(in), out.data,
                                   static_cast<int>(in.numel()), MpiType(out), comm_));
  }

 private:
  MPI_Comm comm_;
  int size_ = 0, rank_ = 0;
};

class MpiPeerToPeer final : public PeerToPeer {
 public:
  MpiPeerToPeer() { HETSIM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_)); }
  ~MpiPeerToPeer() override {
    WaitSends();
    MPI_Comm_free(&comm_);
  }
  void Send(int peer, Tensor t, int tag) override {
    MPI_Request req;
    HETSIM_MPI_CHECK(MPI_Isend(t.data, static_cast<int>(t.numel()), MpiType(t), peer, tag, comm_, &req));
    pending_.push_back(req);
  }
  void WaitForMessage(int peer, int tag) override {
    HETSIM_MPI_CHECK(MPI_Probe(peer, tag, comm_, MPI_STATUS_IGNORE));
  }
  void Recv(int peer, Tensor t, int tag) override {
    MPI_Status status;
    HETSIM_MPI_CHECK(MPI_Recv(t.data, static_cast<int>(t.numel()), MpiType(t), peer, tag, comm_, &status));
    int count = 0;
    HETSIM_MPI_CHECK(MPI_Get_count(&status, MpiType(t), &count));
    HETSIM_CHECK(count == t.numel(), "pipeline message from rank " + std::to_string(peer) + " has " +
                                         std::to_string(count) + " elements, expected " + std::to_string(t.numel()));
  }
  void Progress() override {
    if (pending_.empty()) return;
    int done = 0;
    HETSIM_MPI_CHECK(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE));
    if (done) pending_.clear();
  }
  void WaitSends() override {
    if (pending_.empty()) return;
    HETSIM_MPI_CHECK(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE));
    pending_.clear();
  }

 private:
  MPI_Comm comm_;
  std::vector<MPI_Request> pending_;
};

class StagedPeerToPeer final : public PeerToPeer {
 public:
  explicit StagedPeerToPeer(Backend* be) : be_(be) { HETSIM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_)); }
  ~StagedPeerToPeer() override {
    WaitSends();
    MPI_Comm_free(&comm_);
  }
  void Send(int peer, Tensor t, int tag) override {
    HETSIM_CHECK(t.bytes() <= INT32_MAX, "a CPU-staged message of more than 2 GiB");
    staged_.emplace_back(t.bytes());
    be_->Download(staged_.back().data(), t);  // device -> host (waits for the producing pass)
    MPI_Request req;
    HETSIM_MPI_CHECK(MPI_Isend(staged_.back().data(), static_cast<int>(t.bytes()), MPI_BYTE, peer, tag, comm_, &req));
    pending_.push_back(req);
  }
  void WaitForMessage(int peer, int tag) override {
    HETSIM_MPI_CHECK(MPI_Probe(peer, tag, comm_, MPI_STATUS_IGNORE));
  }
  void Recv(int peer, Tensor t, int tag) override {
    std::vector<char> host(t.bytes());
    MPI_Status status;
    HETSIM_MPI_CHECK(MPI_Recv(host.data(), static_cast<int>(host.size()), MPI_BYTE, peer, tag, comm_, &status));
    int count = 0;
    HETSIM_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
    HETSIM_CHECK(static_cast<size_t>(count) == host.size(),
                 "CPU-staged message from rank " + std::to_string(peer) + " has " + std::to_string(count) +
                     " bytes, expected " + std::to_string(host.size()));
    be_->Upload(t, host.data());  // host -> device
  }
  void Progress() override {
    if (pending_.empty()) return;
    int done = 0;
    HETSIM_MPI_CHECK(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE));
    if (done) pending_.clear(), staged_.clear();
  }
  void WaitSends() override {
    if (!pending_.empty()) {
      HETSIM_MPI_CHECK(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE));
    }
    pending_.clear();
    staged_.clear();
  }

 private:
  Backend* be_;
  MPI_Comm comm_;
  std::vector<MPI_Request> pending_;
  std::deque<std::vector<char>> staged_;  // host copies of the messages in flight (stable addresses)
};

class MpiCommFactory final : public CommFactory {
 public:
  std::unique_ptr<Comm> CreateGroup(const std::vector<int>& ranks, int index) override {
    MPI_Group world, group;
    HETSIM_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    HETSIM_MPI_CHECK(MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &group));
    MPI_Comm comm;
    HETSIM_MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, group, index, &comm));
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return std::make_unique<MpiComm>(comm);
  }
  std::unique_ptr<PeerToPeer> CreatePeerToPeer(const std::vector<std::pair<int, int>>&) override {
    return std::make_unique<MpiPeerToPeer>();
  }
};

}  // namespace

std::unique_ptr<PeerToPeer> MakeStagedPeerToPeer(Backend* backend) {
  return std::make_unique<StagedPeerToPeer>(backend);
}

std::unique_ptr<CommFactory> MakeMpiCommFactory() { return std::make_unique<MpiCommFactory>(); }

}  // namespace hetsim::executor
