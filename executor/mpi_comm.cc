#include "executor/mpi_comm.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <new>
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

// Sleeping on a word of shared memory until another process changes it (or `timeout_ns` passes): futexes
// shared between processes (not FUTEX_PRIVATE), so a rank that waits costs no CPU until it is woken.
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, long timeout_ns) {
  timespec ts{timeout_ns / 1000000000L, timeout_ns % 1000000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

static_assert(std::atomic<uint32_t>::is_always_lock_free, "the pool's words are shared between processes");

// A safety net only: every wait is woken by the rank it waits for; this bounds the cost of a missed wake-up.
constexpr long kDozeNs = 2000000;

// Words of memory shared by the ranks of one machine (MPI_Win_allocate_shared over `comm`, held by its rank 0).
class SharedWords {
 public:
  SharedWords(MPI_Comm comm, int count) {
    int rank = 0;
    HETSIM_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    void* base = nullptr;
    const auto bytes = static_cast<MPI_Aint>(sizeof(std::atomic<uint32_t>) * static_cast<size_t>(count));
    HETSIM_MPI_CHECK(MPI_Win_allocate_shared(rank == 0 ? bytes : 0, 1, MPI_INFO_NULL, comm, &base, &win_));
    MPI_Aint got = 0;
    int unit = 0;
    HETSIM_MPI_CHECK(MPI_Win_shared_query(win_, 0, &got, &unit, &base));
    HETSIM_CHECK(got >= bytes, "the core pool's shared memory is too small");
    words_ = static_cast<std::atomic<uint32_t>*>(base);
    if (rank == 0) {
      for (int i = 0; i < count; ++i) new (&words_[i]) std::atomic<uint32_t>(0);
    }
    HETSIM_MPI_CHECK(MPI_Barrier(comm));
  }
  ~SharedWords() { MPI_Win_free(&win_); }
  SharedWords(const SharedWords&) = delete;
  SharedWords& operator=(const SharedWords&) = delete;
  std::atomic<uint32_t>& operator[](int i) { return words_[i]; }

 private:
  MPI_Win win_;
  std::atomic<uint32_t>* words_ = nullptr;
};

// The pool of cores (ShareCores), in memory shared by the machine's ranks: a ticket queue — a rank takes the
// next ticket and may compute once fewer than `cores` earlier tickets are still held, so at most `cores`
// ranks compute at once, served in the order they asked — and one doorbell per rank, rung by whoever may
// have ended its wait (a sender, a receiver, a collective's last member).
class CorePool {
 public:
  explicit CorePool(uint32_t cores) : cores_(cores) {
    HETSIM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
    HETSIM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    words_ = std::make_unique<SharedWords>(MPI_COMM_WORLD, kBells + world_);
  }
  void Acquire() { WaitTurn(w(kNext).fetch_add(1)); }
  // Every rank at once, in rank order (the start of a step, the pool idle): the first `world` tickets are
  // reserved for the ranks, in order, before any rank may take another.
  void AcquireInRankOrder() {
    const uint32_t base = w(kNext).load();
    HETSIM_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank_ == 0) w(kNext).fetch_add(static_cast<uint32_t>(world_));
    HETSIM_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    WaitTurn(base + static_cast<uint32_t>(rank_));
  }
  void Release() {
    w(kReleased).fetch_add(1);
    FutexWakeAll(&w(kReleased));
  }
  void Ring(int rank) {
    w(kBells + rank).fetch_add(1);
    FutexWakeAll(&w(kBells + rank));
  }
  // Sleeps until `done()` holds, testing it whenever this rank's doorbell rings.
  template <typename Done>
  void SleepUntil(Done done) {
    std::atomic<uint32_t>& bell = w(kBells + rank_);
    while (!done()) {
      const uint32_t seen = bell.load();
      if (done()) return;
      FutexWait(&bell, seen, kDozeNs);
    }
  }

 private:
  enum Word { kNext = 0, kReleased = 1, kBells = 2 };
  std::atomic<uint32_t>& w(int i) { return (*words_)[i]; }
  void WaitTurn(uint32_t ticket) {
    // A ticket is served once fewer than `cores` tickets before it are unreleased: ticket < released + cores.
    // Tickets wrap around 2^32, so the two are compared by their signed difference (the released count may
    // pass a served ticket whose rank has not come to claim its core yet).
    const auto cores = static_cast<int32_t>(cores_);
    for (uint32_t seen = w(kReleased).load(); static_cast<int32_t>(ticket - seen) >= cores;
         seen = w(kReleased).load()) {
      FutexWait(&w(kReleased), seen, kDozeNs);
    }
  }
  uint32_t cores_;
  int rank_ = 0, world_ = 0;
  std::unique_ptr<SharedWords> words_;
};

std::unique_ptr<CorePool> g_pool;
thread_local bool t_holds_core = false;

// A collective's members meet on a counter shared by its communicator (ShareCores): each adds one on
// arriving; the last of a round wakes the others, which sleep until then. The collective then runs with
// every member present and awake.
class Arrivals {
 public:
  explicit Arrivals(MPI_Comm comm) : words_(comm, 1) { HETSIM_MPI_CHECK(MPI_Comm_size(comm, &size_)); }
  void Meet() {
    std::atomic<uint32_t>& count = words_[0];
    const uint32_t n = count.fetch_add(1) + 1;
    const uint32_t size = static_cast<uint32_t>(size_);
    const uint32_t round_end = (n + size - 1) / size * size;
    if (n == round_end) {
      FutexWakeAll(&count);
      return;
    }
    // While it waits, the rank keeps MPI progressing: a pipeline send it posted before the collective may need
    // it to answer its receiver (a message above the eager limit), and that receiver may be a member this
    // collective waits for, through others (the receiver rings this rank's doorbell, not this counter).
    for (uint32_t seen = count.load(); seen < round_end; seen = count.load()) {
      FutexWait(&count, seen, kDozeNs);
      int pending = 0;
      HETSIM_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &pending, MPI_STATUS_IGNORE));
    }
  }

 private:
  SharedWords words_;
  int size_ = 0;
};

void WaitAll(std::vector<MPI_Request>* rs) {
  if (g_pool == nullptr) {
    HETSIM_MPI_CHECK(MPI_Waitall(static_cast<int>(rs->size()), rs->data(), MPI_STATUSES_IGNORE));
    return;
  }
  g_pool->SleepUntil([rs] {
    int done = 0;
    HETSIM_MPI_CHECK(MPI_Testall(static_cast<int>(rs->size()), rs->data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  });
}

void WaitForMessageOn(MPI_Comm comm, int peer, int tag) {
  if (g_pool == nullptr) {
    HETSIM_MPI_CHECK(MPI_Probe(peer, tag, comm, MPI_STATUS_IGNORE));
    return;
  }
  g_pool->SleepUntil([&] {
    int found = 0;
    HETSIM_MPI_CHECK(MPI_Iprobe(peer, tag, comm, &found, MPI_STATUS_IGNORE));
    return found != 0;
  });
}

// Pipeline messages ring the peer's doorbell: a send may end its receiver's wait, a receive its sender's.
void RingPeer(int peer) {
  if (g_pool != nullptr) g_pool->Ring(peer);
}

// A receive of a matched message. With a pool, its sender may be asleep (waiting for something else) while
// MPI needs it to answer for a message larger than the eager limit, so the receiver rings it between tests
// until the message is in.
// Completes a posted receive from `peer` the same way.
void Complete(MPI_Request* r, int peer, MPI_Status* status) {
  if (g_pool == nullptr) {
    HETSIM_MPI_CHECK(MPI_Wait(r, status));
    return;
  }
  for (int done = 0;;) {
    HETSIM_MPI_CHECK(MPI_Test(r, &done, status));
    if (done) break;
    g_pool->Ring(peer);
    timespec ts{0, 10000};
    nanosleep(&ts, nullptr);
  }
}

void Receive(void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm, MPI_Status* status) {
  if (g_pool == nullptr) {
    HETSIM_MPI_CHECK(MPI_Recv(buf, count, type, peer, tag, comm, status));
    return;
  }
  MPI_Request r;
  HETSIM_MPI_CHECK(MPI_Irecv(buf, count, type, peer, tag, comm, &r));
  Complete(&r, peer, status);
}

// A communicator's collectives through memory shared by its members (ShareCores; every rank on one machine):
// each member writes its contribution into its own segment, the members meet (Arrivals), and each computes its
// result from the segments on its own — so no collective needs its members to run at the same moment, which a
// pool of fewer cores than ranks cannot give (MPI's shared-memory collectives poll in rounds between members).
// Every member reduces in member order, so an all-reduce gives each member the same bits. Two halves
// alternate by call: a member may start the next collective while a slower one still reads this one, and can
// reach the one after only when every member has arrived at the next (done reading).
class SharedCollectives {
 public:
  explicit SharedCollectives(MPI_Comm comm) : comm_(comm), arrivals_(comm) {
    HETSIM_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    HETSIM_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  }
  ~SharedCollectives() {
    if (allocated_) MPI_Win_free(&win_);
  }
  int size() const { return size_; }
  int rank() const { return rank_; }
  // Member m's half for this call, holding at least `n` floats (every member asks for the same n).
  float* Write(int64_t n) {
    Reserve(n);
    return Half(rank_);
  }
  // After every member's Write and its copy in: all contributions are readable.
  void Meet() { arrivals_.Meet(); }
  // Write and Meet for a member whose contribution is `n` floats at `data`.
  void Post(const void* data, int64_t n) {
    std::copy_n(static_cast<const float*>(data), n, Write(n));
    Meet();
  }
  const float* Read(int member) { return Half(member); }
  // The end of a call: the next uses the other half.
  void Done() { parity_ ^= 1; }

 private:
  float* Half(int member) { return bases_[static_cast<size_t>(member)] + (parity_ ? capacity_ : 0); }
  void Reserve(int64_t n) {
    if (n <= capacity_) return;
    // Collective (every member reaches it in the same call with the same n); MPI_Win_free waits for all.
    if (allocated_) MPI_Win_free(&win_);
    capacity_ = std::max<int64_t>(n, 2 * capacity_);
    void* base = nullptr;
    HETSIM_MPI_CHECK(MPI_Win_allocate_shared(static_cast<MPI_Aint>(2 * capacity_ * sizeof(float)), sizeof(float),
                                             MPI_INFO_NULL, comm_, &base, &win_));
    allocated_ = true;
    bases_.assign(static_cast<size_t>(size_), nullptr);
    for (int m = 0; m < size_; ++m) {
      MPI_Aint got = 0;
      int unit = 0;
      void* b = nullptr;
      HETSIM_MPI_CHECK(MPI_Win_shared_query(win_, m, &got, &unit, &b));
      bases_[static_cast<size_t>(m)] = static_cast<float*>(b);
    }
  }
  MPI_Comm comm_;
  Arrivals arrivals_;
  int size_ = 0, rank_ = 0;
  MPI_Win win_;
  bool allocated_ = false;
  int64_t capacity_ = 0;  // floats per half
  int parity_ = 0;
  std::vector<float*> bases_;
};

MPI_Datatype MpiType(const Tensor& t) {
  HETSIM_CHECK(t.dtype == DType::kF32, "MPI communication carries f32 tensors only");
  return MPI_FLOAT;
}

class MpiComm final : public Comm {
 public:
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    HETSIM_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    HETSIM_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    if (g_pool != nullptr) shared_ = std::make_unique<SharedCollectives>(comm_);
  }
  ~MpiComm() override {
    shared_.reset();
    MPI_Comm_free(&comm_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  // With a pool of cores (ShareCores) a collective is a wait — the core goes to a rank that computes — and
  // runs through shared memory (SharedCollectives); without, MPI's.
  void AllReduce(Tensor t, ReduceOp op) override {
    HETSIM_CHECK(t.numel() <= INT32_MAX, "MPI all-reduce of more than 2^31 elements");
    if (shared_ == nullptr) {
      HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data, static_cast<int>(t.numel()), MpiType(t),
                                     op == ReduceOp::kSum ? MPI_SUM : MPI_MAX, comm_));
      return;
    }
    const OffCore off;
    const int64_t n = t.numel();
    MpiType(t);
    shared_->Post(t.data, n);
    float* out = static_cast<float*>(t.data);
    std::copy_n(shared_->Read(0), n, out);
    for (int m = 1; m < size_; ++m) {
      const float* in = shared_->Read(m);
      if (op == ReduceOp::kSum) {
        for (int64_t i = 0; i < n; ++i) out[i] += in[i];
      } else {
        for (int64_t i = 0; i < n; ++i) out[i] = std::max(out[i], in[i]);
      }
    }
    shared_->Done();
  }
  void ReduceScatter(Tensor in, Tensor out) override {
    HETSIM_CHECK(out.numel() * size_ == in.numel() && out.numel() <= INT32_MAX, "MPI reduce-scatter: bad segment");
    if (shared_ == nullptr) {
      HETSIM_MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, static_cast<int>(out.numel()), MpiType(in),
                                                MPI_SUM, comm_));
      return;
    }
    const OffCore off;
    const int64_t n = out.numel();
    MpiType(in);
    shared_->Post(in.data, in.numel());
    float* o = static_cast<float*>(out.data);
    std::copy_n(shared_->Read(0) + rank_ * n, n, o);
    for (int m = 1; m < size_; ++m) {
      const float* src = shared_->Read(m) + rank_ * n;
      for (int64_t i = 0; i < n; ++i) o[i] += src[i];
    }
    shared_->Done();
  }
  void Broadcast(Tensor t, int root) override {
    HETSIM_CHECK(t.numel() <= INT32_MAX, "MPI broadcast of more than 2^31 elements");
    if (shared_ == nullptr) {
      HETSIM_MPI_CHECK(MPI_Bcast(t.data, static_cast<int>(t.numel()), MpiType(t), root, comm_));
      return;
    }
    const OffCore off;
    MpiType(t);
    float* mine = shared_->Write(t.numel());
    if (rank_ == root) std::copy_n(static_cast<const float*>(t.data), t.numel(), mine);
    shared_->Meet();
    if (rank_ != root) std::copy_n(shared_->Read(root), t.numel(), static_cast<float*>(t.data));
    shared_->Done();
  }
  void AllToAll(Tensor in, Tensor out) override {
    HETSIM_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0 && in.numel() / size_ <= INT32_MAX,
                 "MPI all-to-all: bad blocks");
    const int n = static_cast<int>(in.numel() / size_);
    if (shared_ == nullptr) {
      HETSIM_MPI_CHECK(MPI_Alltoall(in.data, n, MpiType(in), out.data, n, MpiType(out), comm_));
      return;
    }
    const OffCore off;
    MpiType(in);
    shared_->Post(in.data, in.numel());
    for (int m = 0; m < size_; ++m) {
      std::copy_n(shared_->Read(m) + static_cast<int64_t>(rank_) * n, n, static_cast<float*>(out.data) +
                  static_cast<int64_t>(m) * n);
    }
    shared_->Done();
  }
  void SendRecv(Tensor send, int dst, Tensor recv, int src) override {
    HETSIM_CHECK(send.numel() <= INT32_MAX && recv.numel() <= INT32_MAX && dst >= 0 && dst < size_ && src >= 0 &&
                     src < size_,
                 "MPI ring step: bad tensors or peers");
    if (shared_ == nullptr) {
      HETSIM_MPI_CHECK(MPI_Sendrecv(send.data, static_cast<int>(send.numel()), MpiType(send), dst, 0, recv.data,
                                    static_cast<int>(recv.numel()), MpiType(recv), src, 0, comm_,
                                    MPI_STATUS_IGNORE));
      return;
    }
    // A ring step of the whole communicator (every member sends one block and receives one).
    const OffCore off;
    MpiType(send);
    HETSIM_CHECK(send.numel() == recv.numel(), "a ring step through shared memory moves blocks of one size");
    shared_->Post(send.data, send.numel());
    std::copy_n(shared_->Read(src), recv.numel(), static_cast<float*>(recv.data));
    shared_->Done();
    (void)dst;
  }
  void AllGather(Tensor in, Tensor out) override {
    HETSIM_CHECK(in.numel() * size_ == out.numel() && in.numel() <= INT32_MAX, "MPI all-gather: bad segment");
    if (shared_ == nullptr) {
      HETSIM_MPI_CHECK(MPI_Allgather(in.data, static_cast<int>(in.numel()), MpiType(in), out.data,
                                     static_cast<int>(in.numel()), MpiType(out), comm_));
      return;
    }
    const OffCore off;
    MpiType(in);
    shared_->Post(in.data, in.numel());
    for (int m = 0; m < size_; ++m) {
      std::copy_n(shared_->Read(m), in.numel(), static_cast<float*>(out.data) + m * in.numel());
    }
    shared_->Done();
  }

 private:
  MPI_Comm comm_;
  int size_ = 0, rank_ = 0;
  std::unique_ptr<SharedCollectives> shared_;
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
    RingPeer(peer);
  }
  void PostRecv(int peer, Tensor t, int tag) override {
    Posted p;
    HETSIM_MPI_CHECK(MPI_Irecv(t.data, static_cast<int>(t.numel()), MpiType(t), peer, tag, comm_, &p.request));
    posted_[{peer, tag}].push_back(p);
  }
  void WaitForMessage(int peer, int tag) override {
    if (Posted* p = PostedFor(peer, tag)) {
      // The message lands in the posted buffer: waiting for it is waiting for the whole transfer.
      if (!p->done) Complete(&p->request, peer, &p->status);
      p->done = true;
      return;
    }
    WaitForMessageOn(comm_, peer, tag);
  }
  void Recv(int peer, Tensor t, int tag) override {
    MPI_Status status;
    if (Posted* p = PostedFor(peer, tag)) {
      if (!p->done) Complete(&p->request, peer, &p->status);
      status = p->status;
      posted_[{peer, tag}].pop_front();
    } else {
      Receive(t.data, static_cast<int>(t.numel()), MpiType(t), peer, tag, comm_, &status);
    }
    int count = 0;
    HETSIM_MPI_CHECK(MPI_Get_count(&status, MpiType(t), &count));
    RingPeer(peer);
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
    WaitAll(&pending_);
    pending_.clear();
  }

 private:
  struct Posted {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Status status{};
    bool done = false;
  };
  Posted* PostedFor(int peer, int tag) {
    auto it = posted_.find({peer, tag});
    return it == posted_.end() || it->second.empty() ? nullptr : &it->second.front();
  }
  MPI_Comm comm_;
  std::vector<MPI_Request> pending_;
  // Receives posted ahead, per (peer, tag), in posting order (MPI matches them in that order too).
  std::map<std::pair<int, int>, std::deque<Posted>> posted_;
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
    RingPeer(peer);
  }
  void WaitForMessage(int peer, int tag) override {
    WaitForMessageOn(comm_, peer, tag);
  }
  void Recv(int peer, Tensor t, int tag) override {
    std::vector<char> host(t.bytes());
    MPI_Status status;
    Receive(host.data(), static_cast<int>(host.size()), MPI_BYTE, peer, tag, comm_, &status);
    int count = 0;
    HETSIM_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
    RingPeer(peer);
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
      WaitAll(&pending_);
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

void ShareCores(uint32_t cores) {
  g_pool.reset();
  if (cores > 0) g_pool = std::make_unique<CorePool>(cores);
}

void TakeCoreInRankOrder() {
  if (g_pool == nullptr) return;
  g_pool->AcquireInRankOrder();
  t_holds_core = true;
}

void LeaveCore() {
  if (g_pool == nullptr || !t_holds_core) return;
  g_pool->Release();
  t_holds_core = false;
}

OffCore::OffCore() : released_(g_pool != nullptr && t_holds_core) {
  if (released_) LeaveCore();
}

OffCore::~OffCore() {
  if (!released_) return;
  g_pool->Acquire();
  t_holds_core = true;
}

}  // namespace hetsim::executor
