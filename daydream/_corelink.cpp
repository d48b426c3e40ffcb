// daydream._corelink: round-trip time of a cache line between two CPUs.
//
// Two threads, pinned one to each CPU, pass a flag back and forth through one
// cache line; the mean time of a round trip is what a hand-over of freshly
// written data between those CPUs costs.  On a virtual machine it tells where
// the host has placed the two virtual CPUs (see daydream/corelink.py).
// Pure C++17 + pybind11, Linux only; the GIL is released while it runs.
#include <pybind11/pybind11.h>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace py = pybind11;

namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Line {
  std::atomic<int> flag{0};   // 1: the far side's turn, 0: ours
  std::atomic<bool> stop{false};
};

int pin_self(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

void answer(Line* line, int cpu, std::atomic<int>* pinned) {
  const int err = pin_self(cpu);
  pinned->store(err == 0 ? 1 : -err);
  if (err != 0) return;
  for (;;) {
    while (line->flag.load(std::memory_order_acquire) != 1) {
      if (line->stop.load(std::memory_order_relaxed)) return;
    }
    line->flag.store(0, std::memory_order_release);
  }
}

// Returns (round trips done, seconds taken).  Stops early at the deadline so that a CPU
// busy with other work cannot hold the caller for long.
py::tuple round_trips(int cpu_a, int cpu_b, int64_t count, double max_seconds) {
  if (cpu_a == cpu_b) throw std::invalid_argument("the two CPUs must differ");
  if (cpu_a < 0 || cpu_b < 0 || cpu_a >= CPU_SETSIZE || cpu_b >= CPU_SETSIZE)
    throw std::invalid_argument("CPU numbers must lie in [0, " + std::to_string(CPU_SETSIZE) + ")");
  if (count <= 0) throw std::invalid_argument("count must be positive");
  Line line;
  std::atomic<int> pinned{0};
  int64_t done = 0;
  double seconds = 0.0;
  int own = 0;
  {
    py::gil_scoped_release release;
    cpu_set_t before;
    pthread_getaffinity_np(pthread_self(), sizeof before, &before);
    std::thread other(answer, &line, cpu_b, &pinned);
    own = pin_self(cpu_a);
    while (pinned.load() == 0) std::this_thread::yield();
    if (own == 0 && pinned.load() == 1) {
      const auto deadline = Clock::now() + std::chrono::duration<double>(max_seconds);
      const auto t0 = Clock::now();
      for (; done < count; ++done) {
        line.flag.store(1, std::memory_order_release);
        while (line.flag.load(std::memory_order_acquire) != 0) {}
        if ((done & 255) == 255 && Clock::now() > deadline) { ++done; break; }
      }
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    line.stop.store(true);
    other.join();
    pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  }
  if (own != 0) throw std::runtime_error("cannot run on CPU " + std::to_string(cpu_a) + ": " + std::strerror(own));
  if (pinned.load() != 1)
    throw std::runtime_error("cannot run on CPU " + std::to_string(cpu_b) + ": " + std::strerror(-pinned.load()));
  return py::make_tuple(done, seconds);
}

}  // namespace

PYBIND11_MODULE(_corelink, m) {
  m.doc() = "Round-trip time of a cache line between two CPUs (see daydream/corelink.py).";
  m.def("round_trips", &round_trips, py::arg("cpu_a"), py::arg("cpu_b"), py::arg("count"),
        py::arg("max_seconds"),
        "Bounce a flag between threads pinned to two CPUs; returns (round trips, seconds).");
}
