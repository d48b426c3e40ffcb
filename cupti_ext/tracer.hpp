// The process-wide CUPTI activity tracer.
//
// CUPTI's activity API is global to the process, so there is one tracer.  Its
// buffer callbacks run on CUPTI's own thread (or inside cuptiActivityFlushAll)
// and never touch Python or the GIL: a completed buffer is decoded into C++
// columns right away and the buffer goes back to a bounded free list.  That
// is what keeps interpreter exit free of deadlocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "columns.hpp"

namespace daydream {

// A CUPTI call returned an error.
struct CuptiCallError : std::runtime_error {
  CuptiCallError(std::string call_, int code_, std::string result_)
      : std::runtime_error(call_ + " failed: " + result_),
        call(std::move(call_)), code(code_), result(std::move(result_)) {}
  std::string call;
  int code;
  std::string result;
};

// Tracing cannot work here (no driver, no device, ...); ``what()`` says why.
struct UnavailableError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// start/stop called in the wrong order.
struct StateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TracerOptions {
  std::vector<int> kinds;        // CUpti_ActivityKind values to enable
  size_t buffer_bytes = 8u << 20;
  size_t max_buffers = 16;       // bound on buffers handed to CUPTI at once
  size_t max_rows = 50'000'000;  // bound on decoded rows held between flushes
  // Runtime / driver API callback ids whose records are not wanted
  // (cuptiActivityEnableRuntimeApi / ...DriverApi(cbid, 0) after the kinds).
  std::vector<uint32_t> runtime_off;
  std::vector<uint32_t> driver_off;
};

struct TracerStats {
  uint64_t dropped_by_cupti = 0;    // cuptiActivityGetNumDroppedRecords
  uint64_t dropped_by_row_limit = 0;
  uint64_t buffers_refused = 0;     // requests answered with no buffer
  uint64_t buffers_completed = 0;
  uint64_t foreign_buffers = 0;     // completed buffers another CUPTI client had allocated
  uint64_t records_seen = 0;
  uint64_t walk_errors = 0;
  int last_walk_error = 0;
};

struct Batch {
  Columns columns;
  TracerStats stats;
};

// Checks the CUDA driver and devices without CUPTI: dlopen libcuda.so.1,
// cuInit, cuDeviceGetCount.  Returns an empty string when tracing can work,
// else the reason it cannot.
std::string probe_driver(int* device_count, int* driver_version);

void tracer_start(const TracerOptions& options);
Batch tracer_flush();
Batch tracer_stop();
bool tracer_active();
// Best effort stop used at interpreter exit: disables and flushes, drops the
// data, never throws.
void tracer_shutdown() noexcept;

std::string result_string(int code);
void check(const char* call, int code);

}  // namespace daydream
