// daydream._simcore: compiled discrete-event core of daydream.sim.
//
// A line-by-line port of daydream/sim/reference.py (the reference simulator):
// same event heap order (time, priority, sequence), same lane dispatch, same
// dynamic waits and collectives, so both give identical start/end arrays
// (tests/test_sim_fast.py checks this on random graphs).  Pure C++17, no CUDA.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <sys/mman.h>

#include <cstdint>
#include <new>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace py = pybind11;
using i64 = int64_t;
using i32 = int32_t;
using i8 = int8_t;

namespace {

constexpr int kEnd = 0, kStart = 1, kStartSync = 2;   // event priorities at equal times
constexpr i64 kNeg = -(i64(1) << 62);
constexpr int kAnchorStart = 0, kAnchorEnd = 1;
constexpr int kEdgeLaunch = 1;
constexpr int kWaitStream = 1;


// Allocator for the large per-task arrays: anonymous mmap with transparent huge
// pages requested (MADV_HUGEPAGE), so that touching 10M tasks' state costs a few
// thousand page faults rather than hundreds of thousands (numpy does the same).
template <class T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <class U>
  HugeAlloc(const HugeAlloc<U>&) {}
  T* allocate(size_t n) {
    size_t bytes = n * sizeof(T);
    if (bytes < (size_t(4) << 20)) return static_cast<T*>(::operator new(bytes));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    size_t bytes = n * sizeof(T);
    if (bytes < (size_t(4) << 20)) ::operator delete(p);
    else munmap(p, bytes);
  }
  template <class U>
  bool operator==(const HugeAlloc<U>&) const { return true; }
  template <class U>
  bool operator!=(const HugeAlloc<U>&) const { return false; }
};
template <class T>
using Vec = std::vector<T, HugeAlloc<T>>;

struct Event {
  i64 time;
  i64 seq;
  i32 prio;
  i32 task;
  bool operator>(const Event& o) const {
    if (time != o.time) return time > o.time;
    if (prio != o.prio) return prio > o.prio;
    return seq > o.seq;
  }
};

struct Ready {  // entry of a PRIORITY lane's ready queue
  i64 priority;
  i64 pos;
  i32 task;
  bool operator>(const Ready& o) const {
    if (priority != o.priority) return priority > o.priority;
    if (pos != o.pos) return pos > o.pos;
    return task > o.task;
  }
};

template <class T>
const T* ptr(const py::array_t<T, py::array::c_style | py::array::forcecast>& a, size_t n, const char* what) {
  if (static_cast<size_t>(a.size()) != n) throw std::invalid_argument(std::string("bad length of ") + what);
  return a.data();
}

using ArrI64 = py::array_t<i64, py::array::c_style | py::array::forcecast>;
using ArrI32 = py::array_t<i32, py::array::c_style | py::array::forcecast>;
using ArrI8 = py::array_t<i8, py::array::c_style | py::array::forcecast>;

struct Sim {
  // inputs
  size_t n = 0, L = 0;
  const i32 *lane, *wait_lane, *group, *rank;
  const i64 *dur, *gap, *wait_lag, *priority, *transfer;
  const i8* wait_kind;
  const i64 *lane_ptr, *lane_flat;
  size_t n_groups = 0;
  // outputs
  i64 *start, *end, *start_by, *end_by;
  bool* start_by_start;
  // edges (CSR by source, stable)
  Vec<i64> indptr;
  Vec<i32> out_dst;
  Vec<i64> out_lag;
  Vec<i8> out_kind, out_anchor, out_target;
  // task state
  Vec<i32> pend_start, pend_end, lane_pos, ready_by, end_by_tmp;
  Vec<i64> ready, end_ready;
  Vec<uint8_t> flags;   // bit0 started, bit1 done, bit2 has_launch, bit3 ready_by_start, bit4 has waiters
  std::unordered_map<i32, std::vector<i32>> waiters;
  // lanes
  std::vector<i64> head, prev_end, enq_pos;
  std::vector<i32> prev_task;
  std::vector<uint8_t> busy;
  std::vector<std::vector<i32>> gpu_lanes_of_rank;
  std::unordered_map<i32, size_t> rank_slot;
  using ReadyQueue = std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>>;
  std::vector<ReadyQueue> ready_q;   // PRIORITY lanes' ready queues
  std::vector<i32> queue_of;          // lane -> index in ready_q, -1 for FIFO lanes
  // collectives
  std::vector<i64> grp_size, grp_arrived, grp_max;
  std::vector<std::vector<i32>> grp_members;
  // heap
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> heap;
  i64 counter = 0;

  void push(i64 time, int prio, i32 t) { heap.push(Event{time, counter++, prio, t}); }

  void dispatch(i64 li) {
    if (busy[li]) return;
    i32 t;
    i32 qi = queue_of[li];
    if (qi >= 0) {
      ReadyQueue& q = ready_q[qi];
      if (q.empty()) return;
      t = q.top().task;
      q.pop();
    } else {
      if (head[li] >= lane_ptr[li + 1] - lane_ptr[li]) return;
      t = static_cast<i32>(lane_flat[lane_ptr[li] + head[li]]);
      if (pend_start[t]) return;
    }
    i64 s_lane = prev_end[li] + gap[t];
    i64 s;
    if (ready[t] > s_lane || (ready[t] == s_lane && ready_by[t] >= 0)) {
      s = ready[t];
      start_by[t] = ready_by[t];
      start_by_start[t] = flags[t] & 8;
    } else {
      s = s_lane;
      start_by[t] = prev_task[li];
    }
    busy[li] = 1;
    head[li] += 1;
    start[t] = s;
    push(s, wait_kind[t] ? kStartSync : kStart, t);
  }

  void finish_if_ready(i32 t) {
    if ((flags[t] & 1) && !pend_end[t] && end[t] == kNeg) {
      i64 own = start[t] + dur[t];
      if (end_ready[t] > own) {
        end[t] = end_ready[t];
        end_by[t] = end_by_tmp[t];
      } else {
        end[t] = own;
      }
      push(end[t], kEnd, t);
    }
  }

  void release_end(i32 t, i64 time, i32 by) {
    if (time > end_ready[t]) {
      end_ready[t] = time;
      end_by_tmp[t] = by;
    }
    pend_end[t] -= 1;
    finish_if_ready(t);
  }

  void became_ready(i32 d) {
    i64 li = lane[d];
    i32 qi = queue_of[li];
    if (qi >= 0) ready_q[qi].push(Ready{priority[d], lane_pos[d], d});
    dispatch(li);
  }

  void follow(i32 t, i64 time, int anchor) {
    for (i64 k = indptr[t]; k < indptr[t + 1]; ++k) {
      if (out_anchor[k] != anchor) continue;
      i32 d = out_dst[k];
      i64 at = time + out_lag[k];
      if (out_target[k] == kAnchorEnd) {
        release_end(d, at, t);
        continue;
      }
      if (at > ready[d]) {
        ready[d] = at;
        ready_by[d] = t;
        if (anchor == kAnchorStart) flags[d] |= 8; else flags[d] &= ~8;
      }
      if (out_kind[k] == kEdgeLaunch) {
        i64 li = lane[d];
        if (lane_pos[d] > enq_pos[li]) enq_pos[li] = lane_pos[d];
      }
      pend_start[d] -= 1;
      if (!pend_start[d]) became_ready(d);
    }
  }

  void wait_on_lane(i32 t, i64 li) {
    i64 p = enq_pos[li];
    if (p < 0) return;
    i32 x = static_cast<i32>(lane_flat[lane_ptr[li] + p]);
    if (flags[x] & 2) {
      i64 at = end[x] + wait_lag[t];
      if (at > end_ready[t]) {
        end_ready[t] = at;
        end_by_tmp[t] = x;
      }
    } else {
      pend_end[t] += 1;
      waiters[x].push_back(t);
      flags[x] |= 16;
    }
  }

  void resolve_waits(i32 t) {
    if (wait_kind[t] == kWaitStream) {
      i64 li = wait_lane[t];
      if (li < 0) li += static_cast<i64>(L);   // Python indexing of the reference
      if (li < 0 || li >= static_cast<i64>(L)) throw std::out_of_range("wait_lane out of range");
      wait_on_lane(t, li);
      return;
    }
    auto it = rank_slot.find(rank[t]);
    if (it == rank_slot.end()) return;
    for (i32 li : gpu_lanes_of_rank[it->second]) wait_on_lane(t, li);
  }

  void arrive(i32 t) {
    size_t gid = static_cast<size_t>(group[t]);
    if (gid >= n_groups) throw std::out_of_range("collective group out of range");
    grp_members[gid].push_back(t);
    grp_arrived[gid] += 1;
    if (start[t] > grp_max[gid]) grp_max[gid] = start[t];
    if (grp_arrived[gid] == grp_size[gid]) {
      i32 last = grp_members[gid][0];
      for (i32 m : grp_members[gid])
        if (start[m] > start[last]) last = m;
      i64 release = grp_max[gid] + transfer[gid];
      std::vector<i32> members = grp_members[gid];
      for (i32 m : members) release_end(m, release + wait_lag[m], last);
    }
  }

  void build_edges(size_t m, const i32* src, const i32* dst, const i8* kind, const i8* anchor,
                   const i8* target, const i64* lag) {
    indptr.assign(n + 1, 0);
    for (size_t k = 0; k < m; ++k) {
      if (src[k] < 0 || static_cast<size_t>(src[k]) >= n || dst[k] < 0 || static_cast<size_t>(dst[k]) >= n)
        throw std::out_of_range("edge endpoint out of range");
      indptr[src[k] + 1] += 1;
      if (target[k] == kAnchorStart) pend_start[dst[k]] += 1; else pend_end[dst[k]] += 1;
      if (kind[k] == kEdgeLaunch) flags[dst[k]] |= 4;
    }
    for (size_t i = 0; i < n; ++i) indptr[i + 1] += indptr[i];
    out_dst.resize(m); out_lag.resize(m); out_kind.resize(m); out_anchor.resize(m); out_target.resize(m);
    Vec<i64> fill(indptr.begin(), indptr.end() - 1);
    for (size_t k = 0; k < m; ++k) {
      i64 at = fill[src[k]]++;
      out_dst[at] = dst[k]; out_lag[at] = lag[k]; out_kind[at] = kind[k];
      out_anchor[at] = anchor[k]; out_target[at] = target[k];
    }
  }

  void build_lanes(const i8* lane_is_gpu, const i32* lane_rank, const i8* lane_prio) {
    for (size_t li = 0; li < L; ++li) {
      for (i64 p = lane_ptr[li]; p < lane_ptr[li + 1]; ++p) {
        i64 t = lane_flat[p];
        if (t < 0 || static_cast<size_t>(t) >= n) throw std::out_of_range("lane task out of range");
        lane_pos[t] = static_cast<i32>(p - lane_ptr[li]);
      }
      if (lane_is_gpu[li]) {
        auto it = rank_slot.find(lane_rank[li]);
        if (it == rank_slot.end()) {
          it = rank_slot.emplace(lane_rank[li], gpu_lanes_of_rank.size()).first;
          gpu_lanes_of_rank.emplace_back();
        }
        gpu_lanes_of_rank[it->second].push_back(static_cast<i32>(li));
      }
      queue_of[li] = -1;
      if (lane_prio[li]) {
        queue_of[li] = static_cast<i32>(ready_q.size());
        ready_q.emplace_back();
      }
    }
  }

  size_t run() {
    for (size_t li = 0; li < L; ++li) {
      if (queue_of[li] < 0) continue;
      for (i64 p = lane_ptr[li]; p < lane_ptr[li + 1]; ++p) {
        i32 t = static_cast<i32>(lane_flat[p]);
        if (!pend_start[t]) ready_q[queue_of[li]].push(Ready{priority[t], lane_pos[t], t});
      }
    }
    for (size_t li = 0; li < L; ++li) dispatch(static_cast<i64>(li));
    size_t finished = 0;
    while (!heap.empty()) {
      Event ev = heap.top();
      heap.pop();
      i32 t = ev.task;
      i64 li = lane[t];
      if (ev.prio != kEnd) {
        flags[t] |= 1;
        if (!(flags[t] & 4) && lane_pos[t] > enq_pos[li]) enq_pos[li] = lane_pos[t];
        if (wait_kind[t]) resolve_waits(t);
        if (group[t] >= 0) arrive(t);
        follow(t, start[t], kAnchorStart);
        finish_if_ready(t);
        continue;
      }
      flags[t] |= 2;
      finished += 1;
      busy[li] = 0;
      prev_end[li] = end[t];
      prev_task[li] = t;
      auto w = (flags[t] & 16) ? waiters.find(t) : waiters.end();
      if (w != waiters.end()) {
        std::vector<i32> ws = std::move(w->second);
        waiters.erase(w);
        for (i32 x : ws) release_end(x, end[t] + wait_lag[x], t);
      }
      follow(t, end[t], kAnchorEnd);
      dispatch(li);
    }
    return finished;
  }
};

py::tuple simulate(ArrI32 lane, ArrI64 dur, ArrI64 gap, ArrI8 wait_kind, ArrI32 wait_lane, ArrI64 wait_lag,
                   ArrI32 group, ArrI32 rank, ArrI64 priority, ArrI32 src, ArrI32 dst, ArrI8 ekind,
                   ArrI8 eanchor, ArrI8 etarget, ArrI64 elag, ArrI64 lane_ptr, ArrI64 lane_flat,
                   ArrI8 lane_is_gpu, ArrI32 lane_rank, ArrI8 lane_prio, ArrI64 transfer,
                   py::array_t<i64> start, py::array_t<i64> end, py::array_t<i64> start_by,
                   py::array_t<bool> start_by_start, py::array_t<i64> end_by) {
  Sim s;
  s.n = static_cast<size_t>(lane.size());
  s.L = static_cast<size_t>(lane_is_gpu.size());
  size_t n = s.n, m = static_cast<size_t>(src.size());
  s.lane = ptr(lane, n, "lane"); s.dur = ptr(dur, n, "dur_ns"); s.gap = ptr(gap, n, "gap_ns");
  s.wait_kind = ptr(wait_kind, n, "wait_kind"); s.wait_lane = ptr(wait_lane, n, "wait_lane");
  s.wait_lag = ptr(wait_lag, n, "wait_lag_ns"); s.group = ptr(group, n, "group");
  s.rank = ptr(rank, n, "rank"); s.priority = ptr(priority, n, "priority");
  s.lane_ptr = ptr(lane_ptr, s.L + 1, "lane_ptr");
  s.lane_flat = lane_flat.data();
  s.n_groups = static_cast<size_t>(transfer.size());
  s.transfer = transfer.data();
  s.start = start.mutable_data(); s.end = end.mutable_data(); s.start_by = start_by.mutable_data();
  s.start_by_start = start_by_start.mutable_data(); s.end_by = end_by.mutable_data();
  if (static_cast<size_t>(start.size()) != n || static_cast<size_t>(end.size()) != n)
    throw std::invalid_argument("bad output length");
  size_t finished;
  {
    py::gil_scoped_release nogil;
    s.pend_start.assign(n, 0); s.pend_end.assign(n, 0); s.lane_pos.assign(n, 0);
    s.ready_by.assign(n, -1); s.end_by_tmp.assign(n, -1);
    s.ready.assign(n, kNeg); s.end_ready.assign(n, kNeg); s.flags.assign(n, 0);
    for (size_t t = 0; t < n; ++t) s.end[t] = kNeg;
    s.build_edges(m, ptr(src, m, "src"), ptr(dst, m, "dst"), ptr(ekind, m, "kind"), ptr(eanchor, m, "anchor"),
                  ptr(etarget, m, "target"), ptr(elag, m, "lag_ns"));
    s.head.assign(s.L, 0); s.prev_end.assign(s.L, 0); s.enq_pos.assign(s.L, -1);
    s.prev_task.assign(s.L, -1); s.busy.assign(s.L, 0); s.queue_of.assign(s.L, -1);
    s.build_lanes(lane_is_gpu.data(), lane_rank.data(), lane_prio.data());
    s.grp_size.assign(s.n_groups, 0); s.grp_arrived.assign(s.n_groups, 0);
    s.grp_max.assign(s.n_groups, kNeg); s.grp_members.resize(s.n_groups);
    for (size_t t = 0; t < n; ++t) {
      if (s.group[t] >= 0) {
        if (static_cast<size_t>(s.group[t]) >= s.n_groups) throw std::out_of_range("collective group out of range");
        s.grp_size[s.group[t]] += 1;
        s.pend_end[t] += 1;
      }
    }
    finished = s.run();
  }
  py::list stuck;
  if (finished != n) {
    for (size_t t = 0; t < n && py::len(stuck) < 5; ++t)
      if (!(s.flags[t] & 2)) stuck.append(py::int_(t));
  }
  return py::make_tuple(finished, stuck);
}

}  // namespace

PYBIND11_MODULE(_simcore, m) {
  m.doc() = "Compiled discrete-event core of daydream.sim (see daydream/sim/reference.py).";
  m.def("simulate", &simulate, "Simulate a flattened dependency graph; fills the output arrays.");
}
