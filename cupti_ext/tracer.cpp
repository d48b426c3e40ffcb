#include "tracer.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <utility>

#include "decoder.hpp"

namespace daydream {

namespace {

struct State {
  std::mutex control_mu;  // serialises start / flush / stop
  std::mutex data_mu;     // guards everything below
  bool active = false;
  TracerOptions options;
  Columns columns;
  TracerStats stats;
  std::vector<uint8_t*> free_buffers;
  // Every buffer this tracer allocated.  Another CUPTI client in the process
  // (Kineto) registers its own callbacks; buffers it handed to CUPTI can come
  // back here and ours go to it.  A foreign buffer is read but never reused or
  // freed: its size and allocator are not ours.
  std::unordered_set<uint8_t*> owned;
  size_t buffers_allocated = 0;
  std::vector<int> enabled;
};

// Leaked on purpose: CUPTI may call the buffer callbacks while the process
// tears down, after static destructors would have run.
State& state() {
  static State* s = new State();
  return *s;
}

constexpr size_t kAlign = 8;  // ACTIVITY_RECORD_ALIGNMENT in CUPTI's samples

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  State& s = state();
  *max_records = 0;  // as many as fit
  std::lock_guard<std::mutex> lock(s.data_mu);
  if (!s.free_buffers.empty()) {
    *buffer = s.free_buffers.back();
    s.free_buffers.pop_back();
    *size = s.options.buffer_bytes;
    return;
  }
  if (s.buffers_allocated < s.options.max_buffers) {
    auto* b = static_cast<uint8_t*>(std::aligned_alloc(kAlign, s.options.buffer_bytes));
    if (b != nullptr) {
      s.buffers_allocated += 1;
      s.owned.insert(b);
      *buffer = b;
      *size = s.options.buffer_bytes;
      return;
    }
  }
  // Bound reached: CUPTI drops the records and counts them as dropped.
  s.stats.buffers_refused += 1;
  *buffer = nullptr;
  *size = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                               size_t /*size*/, size_t valid_size) {
  State& s = state();
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS) {
    dropped = 0;
  }
  std::lock_guard<std::mutex> lock(s.data_mu);
  s.stats.dropped_by_cupti += dropped;
  if (buffer == nullptr) return;
  const DecodeStats d = decode_buffer(buffer, valid_size, s.columns, s.options.max_rows);
  s.stats.buffers_completed += 1;
  s.stats.records_seen += d.records;
  s.stats.dropped_by_row_limit += d.over_limit;
  if (d.walk_error != 0) {
    s.stats.walk_errors += 1;
    s.stats.last_walk_error = d.walk_error;
  }
  if (s.owned.count(buffer) != 0) {
    s.free_buffers.push_back(buffer);
  } else {
    s.stats.foreign_buffers += 1;
  }
}

Batch take_batch(State& s) {
  Batch out;
  std::lock_guard<std::mutex> lock(s.data_mu);
  std::swap(out.columns, s.columns);
  std::swap(out.stats, s.stats);
  return out;
}

void disable_enabled(State& s) noexcept {
  for (int kind : s.enabled) cuptiActivityDisable(static_cast<CUpti_ActivityKind>(kind));
  s.enabled.clear();
}

void check_or_disable(State& s, const char* call, CUptiResult rc) {
  if (rc == CUPTI_SUCCESS) return;
  disable_enabled(s);
  throw CuptiCallError(call, static_cast<int>(rc), result_string(rc));
}

}  // namespace

std::string result_string(int code) {
  const char* text = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(code), &text) != CUPTI_SUCCESS ||
      text == nullptr) {
    return "CUPTI result " + std::to_string(code);
  }
  return text;
}

void check(const char* call, int code) {
  if (code != CUPTI_SUCCESS) throw CuptiCallError(call, code, result_string(code));
}

std::string probe_driver(int* device_count, int* driver_version) {
  *device_count = 0;
  *driver_version = 0;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return std::string("the CUDA driver library libcuda.so.1 cannot be loaded "
                       "(no NVIDIA driver on this machine?): ") +
           (err ? err : "unknown dlopen error");
  }
  // The handle is kept: unloading the driver under a live process is unsafe.
  using InitFn = int (*)(unsigned int);
  using CountFn = int (*)(int*);
  using VersionFn = int (*)(int*);
  using NameFn = int (*)(int, const char**);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto version = reinterpret_cast<VersionFn>(dlsym(lib, "cuDriverGetVersion"));
  auto name = reinterpret_cast<NameFn>(dlsym(lib, "cuGetErrorName"));
  if (init == nullptr || count == nullptr) {
    return "libcuda.so.1 lacks cuInit/cuDeviceGetCount (not a CUDA driver?)";
  }
  if (version != nullptr) version(driver_version);
  const int rc = init(0);
  if (rc != 0) {
    const char* err = nullptr;
    if (name != nullptr) name(rc, &err);
    return std::string("cuInit failed: ") + (err ? err : ("CUresult " + std::to_string(rc)));
  }
  const int rc2 = count(device_count);
  if (rc2 != 0) return "cuDeviceGetCount failed: CUresult " + std::to_string(rc2);
  if (*device_count == 0) return "the CUDA driver sees no device";
  return "";
}

void tracer_start(const TracerOptions& options) {
  State& s = state();
  std::lock_guard<std::mutex> control(s.control_mu);
  if (s.active) throw StateError("CUPTI tracing is already running in this process");
  if (options.buffer_bytes < 1024 || options.buffer_bytes % kAlign != 0) {
    throw std::invalid_argument("buffer_bytes must be a multiple of 8 and at least 1024");
  }
  if (options.max_buffers == 0) throw std::invalid_argument("max_buffers must be positive");
  int devices = 0, driver = 0;
  const std::string why = probe_driver(&devices, &driver);
  if (!why.empty()) throw UnavailableError(why);
  {
    std::lock_guard<std::mutex> lock(s.data_mu);
    // Buffers sized for earlier options cannot be reused for larger ones.
    if (options.buffer_bytes != s.options.buffer_bytes) {
      for (uint8_t* b : s.free_buffers) {
        s.owned.erase(b);
        std::free(b);
      }
      s.buffers_allocated -= s.free_buffers.size();
      s.free_buffers.clear();
    }
    s.options = options;
    s.columns.clear();
    s.stats = TracerStats{};
  }
  check("cuptiActivityRegisterCallbacks",
        cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  for (int kind : options.kinds) {
    const CUptiResult rc = cuptiActivityEnable(static_cast<CUpti_ActivityKind>(kind));
    if (rc != CUPTI_SUCCESS) {
      disable_enabled(s);
      throw CuptiCallError("cuptiActivityEnable(kind=" + std::to_string(kind) + ")",
                           static_cast<int>(rc), result_string(rc));
    }
    s.enabled.push_back(kind);
  }
  // After the kinds: enabling a kind resets its per-API choices.  Not undone at
  // stop, since switching an API on without its kind would record it alone.
  for (uint32_t cbid : options.runtime_off) {
    check_or_disable(s, "cuptiActivityEnableRuntimeApi",
                     cuptiActivityEnableRuntimeApi(static_cast<CUpti_CallbackId>(cbid), 0));
  }
  for (uint32_t cbid : options.driver_off) {
    check_or_disable(s, "cuptiActivityEnableDriverApi",
                     cuptiActivityEnableDriverApi(static_cast<CUpti_CallbackId>(cbid), 0));
  }
  s.active = true;
}

Batch tracer_flush() {
  State& s = state();
  std::lock_guard<std::mutex> control(s.control_mu);
  if (!s.active) throw StateError("CUPTI tracing is not running");
  // No data lock held here: a forced flush calls buffer_completed on this thread.
  check("cuptiActivityFlushAll", cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  return take_batch(s);
}

Batch tracer_stop() {
  State& s = state();
  std::lock_guard<std::mutex> control(s.control_mu);
  if (!s.active) throw StateError("CUPTI tracing is not running");
  disable_enabled(s);
  s.active = false;
  const CUptiResult rc = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Batch out = take_batch(s);
  check("cuptiActivityFlushAll", rc);
  return out;
}

bool tracer_active() {
  State& s = state();
  std::lock_guard<std::mutex> control(s.control_mu);
  return s.active;
}

void tracer_shutdown() noexcept {
  State& s = state();
  std::lock_guard<std::mutex> control(s.control_mu);
  if (!s.active) return;
  disable_enabled(s);
  s.active = false;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  take_batch(s);
}

}  // namespace daydream
