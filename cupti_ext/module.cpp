// Python bindings: ``daydream._cupti``.
//
// Records reach Python as one numpy array per column (the C++ vectors are
// moved into the arrays, no copy, no Python object per record) plus a list of
// unique names.  Every CUPTI call runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <deque>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "tracer.hpp"

namespace py = pybind11;
using namespace daydream;

namespace {

template <typename T>
py::array_t<T> to_numpy(std::vector<T>&& v) {
  if (v.empty()) return py::array_t<T>(0);
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(owned->size())}, {sizeof(T)},
                        owned->data(), free_when_done);
}

py::dict columns_to_dict(Columns&& c) {
  py::dict out;
#define DAYDREAM_EXPORT(type, name, sentinel) out[#name] = to_numpy(std::move(c.name));
  DAYDREAM_COLUMNS(DAYDREAM_EXPORT)
#undef DAYDREAM_EXPORT
  py::list names;
  for (const auto& n : c.strings.names()) names.append(py::str(n));
  out["names"] = names;
  py::dict skipped;
  for (const auto& kv : c.skipped_by_kind) skipped[py::int_(kv.first)] = kv.second;
  out["skipped_by_kind"] = skipped;
  return out;
}

py::dict batch_to_dict(Batch&& b) {
  py::dict out = columns_to_dict(std::move(b.columns));
  const TracerStats& s = b.stats;
  out["dropped_records"] = s.dropped_by_cupti + s.dropped_by_row_limit;
  out["dropped_by_cupti"] = s.dropped_by_cupti;
  out["dropped_by_row_limit"] = s.dropped_by_row_limit;
  out["buffers_refused"] = s.buffers_refused;
  out["buffers_completed"] = s.buffers_completed;
  out["foreign_buffers"] = s.foreign_buffers;
  out["records_seen"] = s.records_seen;
  out["walk_errors"] = s.walk_errors;
  out["last_walk_error"] = s.last_walk_error;
  return out;
}

// A buffer of real CUpti_Activity* structs built in memory, laid out as CUPTI
// lays out its own buffers (records back to back, 8-byte aligned).  It owns
// the kernel name strings its records point to, so decoding it is memory safe.
class SyntheticBuffer {
 public:
  template <typename T>
  void append(const T& record) {
    static_assert(sizeof(T) % 8 == 0, "CUPTI records are 8-byte multiples");
    const size_t offset = words_.size() * 8;
    words_.resize(words_.size() + sizeof(T) / 8, 0);
    std::memcpy(reinterpret_cast<uint8_t*>(words_.data()) + offset, &record, sizeof(T));
    count_ += 1;
  }
  const char* keep(const std::string& s) {
    names_.push_back(s);
    return names_.back().c_str();
  }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words_.data()); }
  size_t size_bytes() const { return words_.size() * 8; }
  size_t count() const { return count_; }

 private:
  std::vector<uint64_t> words_;
  std::deque<std::string> names_;  // stable addresses
  size_t count_ = 0;
};

template <typename T>
T zeroed() {
  T r;
  std::memset(&r, 0, sizeof(T));
  return r;
}

// A zeroed record of work on a device stream with the fields every such kind
// shares (the synthetic side of decoder.cpp's device_row).
template <typename T>
T device_record(CUpti_ActivityKind kind, uint64_t start_ns, uint64_t end_ns, uint32_t correlation_id,
                uint32_t device_id, uint32_t context_id, uint32_t stream_id) {
  auto r = zeroed<T>();
  r.kind = kind;
  r.start = start_ns;
  r.end = end_ns;
  r.correlationId = correlation_id;
  r.deviceId = device_id;
  r.contextId = context_id;
  r.streamId = stream_id;
  return r;
}

// Python exception types (leaked on purpose: a static py::object would be
// released after the interpreter is gone).
py::exception<CuptiCallError>* call_error = nullptr;
py::exception<UnavailableError>* unavailable = nullptr;
py::exception<StateError>* state_error = nullptr;

uint32_t or_invalid(const py::object& v) {
  return v.is_none() ? CUPTI_SYNCHRONIZATION_INVALID_VALUE : v.cast<uint32_t>();
}

}  // namespace

PYBIND11_MODULE(_cupti, m) {
  m.doc() = "daydream's CUPTI activity tracer and record decoder (C++).";

  // Leaked on purpose: a static py::object would be released after the
  // interpreter is gone.
  call_error = new py::exception<CuptiCallError>(m, "CuptiCallError", PyExc_RuntimeError);
  unavailable = new py::exception<UnavailableError>(m, "UnavailableError", PyExc_RuntimeError);
  state_error = new py::exception<StateError>(m, "StateError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CuptiCallError& e) {
      // args = (call, code, result string): the facade turns these into CuptiError.
      PyErr_SetObject(call_error->ptr(), py::make_tuple(e.call, e.code, e.result).ptr());
    } catch (const UnavailableError& e) {
      PyErr_SetString(unavailable->ptr(), e.what());
    } catch (const StateError& e) {
      PyErr_SetString(state_error->ptr(), e.what());
    }
  });

  m.attr("CUPTI_API_VERSION") = CUPTI_API_VERSION;
  py::list columns;
  py::dict sentinels;
#define DAYDREAM_NAME(type, name, sentinel) \
  columns.append(#name);                   \
  sentinels[#name] = static_cast<type>(sentinel);
  DAYDREAM_COLUMNS(DAYDREAM_NAME)
#undef DAYDREAM_NAME
  m.attr("COLUMNS") = py::tuple(columns);
  m.attr("SENTINELS") = sentinels;
  // CUPTI's enum values, for cross-checking the Python enums.
#define DAYDREAM_ENUM(dict, prefix, name) dict[#name] = static_cast<int>(prefix##name);
  py::dict kinds;
#define KIND(name) DAYDREAM_ENUM(kinds, CUPTI_ACTIVITY_KIND_, name)
  KIND(MEMCPY) KIND(MEMSET) KIND(KERNEL) KIND(DRIVER) KIND(RUNTIME) KIND(CONCURRENT_KERNEL)
  KIND(OVERHEAD) KIND(MEMCPY2) KIND(SYNCHRONIZATION) KIND(EXTERNAL_CORRELATION)
#undef KIND
  m.attr("ACTIVITY_KINDS") = kinds;
  py::dict copy_kinds;
#define COPY(name) DAYDREAM_ENUM(copy_kinds, CUPTI_ACTIVITY_MEMCPY_KIND_, name)
  COPY(UNKNOWN) COPY(HTOD) COPY(DTOH) COPY(HTOA) COPY(ATOH) COPY(ATOA) COPY(ATOD) COPY(DTOA)
  COPY(DTOD) COPY(HTOH) COPY(PTOP)
#undef COPY
  m.attr("MEMCPY_KINDS") = copy_kinds;
  py::dict sync_types;
#define SYNC(name) DAYDREAM_ENUM(sync_types, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_, name)
  SYNC(UNKNOWN) SYNC(EVENT_SYNCHRONIZE) SYNC(STREAM_WAIT_EVENT) SYNC(STREAM_SYNCHRONIZE)
  SYNC(CONTEXT_SYNCHRONIZE)
#undef SYNC
  m.attr("SYNC_TYPES") = sync_types;
  py::dict ext_kinds;
#define EXT(name) DAYDREAM_ENUM(ext_kinds, CUPTI_EXTERNAL_CORRELATION_KIND_, name)
  EXT(INVALID) EXT(UNKNOWN) EXT(OPENACC) EXT(CUSTOM0) EXT(CUSTOM1) EXT(CUSTOM2)
#undef EXT
#undef DAYDREAM_ENUM
  m.attr("EXTERNAL_KINDS") = ext_kinds;

  m.def("cupti_version", [] {
    uint32_t v = 0;
    check("cuptiGetVersion", cuptiGetVersion(&v));
    return v;
  }, "Runtime CUPTI API version of the loaded libcupti.");
  m.def("result_string", &result_string, py::arg("code"),
        "CUPTI's name for a CUptiResult code.");
  m.def("timestamp_ns", [] {
    uint64_t t = 0;
    check("cuptiGetTimestamp", cuptiGetTimestamp(&t));
    return t;
  }, "CUPTI's current timestamp (the clock of the activity records), in ns.");
  m.def("api_name", [](uint32_t cbid, bool driver) -> py::object {
    const char* n = api_name(driver, cbid);
    if (n == nullptr) return py::none();
    return py::str(n);
  }, py::arg("cbid"), py::arg("driver") = false,
     "Name of a runtime (or driver) API callback id, or None.");
  m.def("probe_driver", [] {
    int devices = 0, driver = 0;
    std::string why;
    {
      py::gil_scoped_release nogil;
      why = probe_driver(&devices, &driver);
    }
    return py::make_tuple(why, devices, driver);
  }, "(reason or '', device count, driver version) from libcuda, without CUPTI.");

  m.def("demangle", [](const std::string& name) {
    // As Kineto names kernels: the demangled form where the name is a mangled one.
    int status = 0;
    char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    std::string shown = (status == 0 && out != nullptr) ? std::string(out) : name;
    std::free(out);
    return shown;
  }, py::arg("name"), "The demangled C++ name, or the name itself if it is not a mangled one.");
  m.def("api_cbids", [](std::vector<std::string> names, bool driver) {
    return api_cbids(driver, names);
  }, py::arg("names"), py::arg("driver") = false,
     "Callback ids of the runtime (or driver) APIs named; unknown names are left out.");
  m.def("start", [](std::vector<int> kinds, size_t buffer_bytes, size_t max_buffers,
                    size_t max_rows, std::vector<uint32_t> runtime_off,
                    std::vector<uint32_t> driver_off) {
    TracerOptions o;
    o.kinds = std::move(kinds);
    o.buffer_bytes = buffer_bytes;
    o.max_buffers = max_buffers;
    o.max_rows = max_rows;
    o.runtime_off = std::move(runtime_off);
    o.driver_off = std::move(driver_off);
    py::gil_scoped_release nogil;
    tracer_start(o);
  }, py::arg("kinds"), py::arg("buffer_bytes") = 8u << 20, py::arg("max_buffers") = 16,
     py::arg("max_rows") = 50'000'000, py::arg("runtime_off") = std::vector<uint32_t>{},
     py::arg("driver_off") = std::vector<uint32_t>{},
     "Enable activity kinds (less the runtime / driver API callback ids given) and start tracing.");
  m.def("flush", [] {
    Batch b;
    {
      py::gil_scoped_release nogil;
      b = tracer_flush();
    }
    return batch_to_dict(std::move(b));
  }, "Force-flush CUPTI's buffers and return the records so far (keeps tracing).");
  m.def("stop", [] {
    Batch b;
    {
      py::gil_scoped_release nogil;
      b = tracer_stop();
    }
    return batch_to_dict(std::move(b));
  }, "Disable the kinds, flush, and return the remaining records.");
  m.def("is_active", [] {
    py::gil_scoped_release nogil;
    return tracer_active();
  });
  m.def("shutdown", [] {
    py::gil_scoped_release nogil;
    tracer_shutdown();
  }, "Best-effort stop for interpreter exit; discards records, never raises.");
  m.def("push_external_correlation_id", [](int kind, uint64_t id) {
    py::gil_scoped_release nogil;
    check("cuptiActivityPushExternalCorrelationId",
          cuptiActivityPushExternalCorrelationId(
              static_cast<CUpti_ExternalCorrelationKind>(kind), id));
  }, py::arg("kind"), py::arg("id"));
  m.def("pop_external_correlation_id", [](int kind) {
    uint64_t last = 0;
    py::gil_scoped_release nogil;
    check("cuptiActivityPopExternalCorrelationId",
          cuptiActivityPopExternalCorrelationId(
              static_cast<CUpti_ExternalCorrelationKind>(kind), &last));
    return last;
  }, py::arg("kind"));

  py::class_<SyntheticBuffer>(m, "SyntheticBuffer",
      "Real CUpti_Activity* records built in memory, for testing the decoder.")
      .def(py::init<>())
      .def("__len__", &SyntheticBuffer::count)
      .def_property_readonly("size_bytes", &SyntheticBuffer::size_bytes)
      .def("tobytes", [](SyntheticBuffer& b) {
        return py::bytes(reinterpret_cast<const char*>(b.data()), b.size_bytes());
      })
      .def("add_kernel", [](SyntheticBuffer& b, int kind, uint64_t start_ns, uint64_t end_ns,
                            uint32_t correlation_id, uint32_t device_id, uint32_t context_id,
                            uint32_t stream_id, const std::string& name,
                            std::tuple<int32_t, int32_t, int32_t> grid,
                            std::tuple<int32_t, int32_t, int32_t> block,
                            int32_t static_shared_bytes, int32_t dynamic_shared_bytes,
                            uint16_t registers_per_thread, uint32_t graph_id,
                            uint64_t graph_node_id) {
        auto r = device_record<KernelRecord>(static_cast<CUpti_ActivityKind>(kind), start_ns, end_ns,
                                             correlation_id, device_id, context_id, stream_id);
        r.name = b.keep(name);
        // Packed struct: no references to its fields.
        r.gridX = std::get<0>(grid);
        r.gridY = std::get<1>(grid);
        r.gridZ = std::get<2>(grid);
        r.blockX = std::get<0>(block);
        r.blockY = std::get<1>(block);
        r.blockZ = std::get<2>(block);
        r.staticSharedMemory = static_shared_bytes;
        r.dynamicSharedMemory = dynamic_shared_bytes;
        r.registersPerThread = registers_per_thread;
        r.graphId = graph_id;
        r.graphNodeId = graph_node_id;
        b.append(r);
      }, py::kw_only(), py::arg("kind") = static_cast<int>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
         py::arg("start_ns"), py::arg("end_ns"), py::arg("correlation_id"),
         py::arg("device_id") = 0, py::arg("context_id") = 1, py::arg("stream_id") = 7,
         py::arg("name"), py::arg("grid") = std::make_tuple(1, 1, 1),
         py::arg("block") = std::make_tuple(1, 1, 1), py::arg("static_shared_bytes") = 0,
         py::arg("dynamic_shared_bytes") = 0, py::arg("registers_per_thread") = 0,
         py::arg("graph_id") = 0, py::arg("graph_node_id") = 0)
      .def("add_memcpy", [](SyntheticBuffer& b, uint64_t start_ns, uint64_t end_ns,
                            uint32_t correlation_id, uint32_t device_id, uint32_t context_id,
                            uint32_t stream_id, uint64_t bytes, uint8_t copy_kind,
                            uint8_t src_kind, uint8_t dst_kind, uint8_t flags,
                            uint32_t graph_id, uint64_t graph_node_id) {
        auto r = device_record<MemcpyRecord>(CUPTI_ACTIVITY_KIND_MEMCPY, start_ns, end_ns, correlation_id,
                                             device_id, context_id, stream_id);
        r.bytes = bytes;
        r.copyKind = copy_kind;
        r.srcKind = src_kind;
        r.dstKind = dst_kind;
        r.flags = flags;
        r.graphId = graph_id;
        r.graphNodeId = graph_node_id;
        b.append(r);
      }, py::kw_only(), py::arg("start_ns"), py::arg("end_ns"), py::arg("correlation_id"),
         py::arg("device_id") = 0, py::arg("context_id") = 1, py::arg("stream_id") = 7,
         py::arg("bytes"), py::arg("copy_kind"), py::arg("src_kind") = 0,
         py::arg("dst_kind") = 0, py::arg("flags") = 0, py::arg("graph_id") = 0,
         py::arg("graph_node_id") = 0)
      .def("add_memcpy_ptop", [](SyntheticBuffer& b, uint64_t start_ns, uint64_t end_ns,
                                 uint32_t correlation_id, uint32_t device_id,
                                 uint32_t context_id, uint32_t stream_id, uint64_t bytes,
                                 uint32_t src_device_id, uint32_t dst_device_id,
                                 uint8_t src_kind, uint8_t dst_kind, uint8_t flags) {
        auto r = device_record<MemcpyPtoPRecord>(CUPTI_ACTIVITY_KIND_MEMCPY2, start_ns, end_ns, correlation_id,
                                                 device_id, context_id, stream_id);
        r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
        r.bytes = bytes;
        r.srcDeviceId = src_device_id;
        r.dstDeviceId = dst_device_id;
        r.srcKind = src_kind;
        r.dstKind = dst_kind;
        r.flags = flags;
        b.append(r);
      }, py::kw_only(), py::arg("start_ns"), py::arg("end_ns"), py::arg("correlation_id"),
         py::arg("device_id") = 0, py::arg("context_id") = 1, py::arg("stream_id") = 7,
         py::arg("bytes"), py::arg("src_device_id"), py::arg("dst_device_id"),
         py::arg("src_kind") = 3, py::arg("dst_kind") = 3, py::arg("flags") = 0)
      .def("add_memset", [](SyntheticBuffer& b, uint64_t start_ns, uint64_t end_ns,
                            uint32_t correlation_id, uint32_t device_id, uint32_t context_id,
                            uint32_t stream_id, uint64_t bytes, uint32_t value,
                            uint16_t memory_kind, uint16_t flags, uint32_t graph_id,
                            uint64_t graph_node_id) {
        auto r = device_record<MemsetRecord>(CUPTI_ACTIVITY_KIND_MEMSET, start_ns, end_ns, correlation_id,
                                             device_id, context_id, stream_id);
        r.bytes = bytes;
        r.value = value;
        r.memoryKind = memory_kind;
        r.flags = flags;
        r.graphId = graph_id;
        r.graphNodeId = graph_node_id;
        b.append(r);
      }, py::kw_only(), py::arg("start_ns"), py::arg("end_ns"), py::arg("correlation_id"),
         py::arg("device_id") = 0, py::arg("context_id") = 1, py::arg("stream_id") = 7,
         py::arg("bytes"), py::arg("value") = 0, py::arg("memory_kind") = 3,
         py::arg("flags") = 0, py::arg("graph_id") = 0, py::arg("graph_node_id") = 0)
      .def("add_api", [](SyntheticBuffer& b, int kind, uint32_t cbid, uint64_t start_ns,
                         uint64_t end_ns, uint32_t correlation_id, uint32_t process_id,
                         uint32_t thread_id, uint32_t return_value) {
        auto r = zeroed<ApiRecord>();
        r.kind = static_cast<CUpti_ActivityKind>(kind);
        r.cbid = cbid;
        r.start = start_ns;
        r.end = end_ns;
        r.correlationId = correlation_id;
        r.processId = process_id;
        r.threadId = thread_id;
        r.returnValue = return_value;
        b.append(r);
      }, py::kw_only(), py::arg("kind") = static_cast<int>(CUPTI_ACTIVITY_KIND_RUNTIME),
         py::arg("cbid"), py::arg("start_ns"), py::arg("end_ns"), py::arg("correlation_id"),
         py::arg("process_id") = 100, py::arg("thread_id") = 200, py::arg("return_value") = 0)
      .def("add_sync", [](SyntheticBuffer& b, int sync_type, uint64_t start_ns,
                          uint64_t end_ns, uint32_t correlation_id, uint32_t context_id,
                          py::object stream_id, py::object cuda_event_id,
                          uint32_t return_value) {
        auto r = zeroed<SyncRecord>();
        r.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
        r.type = static_cast<CUpti_ActivitySynchronizationType>(sync_type);
        r.start = start_ns;
        r.end = end_ns;
        r.correlationId = correlation_id;
        r.contextId = context_id;
        r.streamId = or_invalid(stream_id);
        r.cudaEventId = or_invalid(cuda_event_id);
        r.returnValue = return_value;
        b.append(r);
      }, py::kw_only(), py::arg("sync_type"), py::arg("start_ns"), py::arg("end_ns"),
         py::arg("correlation_id"), py::arg("context_id") = 1,
         py::arg("stream_id") = py::none(), py::arg("cuda_event_id") = py::none(),
         py::arg("return_value") = 0)
      .def("add_external_correlation", [](SyntheticBuffer& b, int external_kind,
                                          uint64_t external_id, uint32_t correlation_id) {
        auto r = zeroed<ExternalCorrelationRecord>();
        r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        r.externalKind = static_cast<CUpti_ExternalCorrelationKind>(external_kind);
        r.externalId = external_id;
        r.correlationId = correlation_id;
        b.append(r);
      }, py::kw_only(), py::arg("external_kind"), py::arg("external_id"),
         py::arg("correlation_id"))
      .def("add_overhead", [](SyntheticBuffer& b, uint64_t start_ns, uint64_t end_ns) {
        // A kind the decoder does not turn into rows (it is counted as skipped).
        auto r = zeroed<CUpti_ActivityOverhead3>();
        r.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
        r.start = start_ns;
        r.end = end_ns;
        b.append(r);
      }, py::kw_only(), py::arg("start_ns"), py::arg("end_ns"));

  m.def("decode", [](SyntheticBuffer& b, size_t max_rows) {
    Columns c;
    DecodeStats s;
    {
      py::gil_scoped_release nogil;
      s = decode_buffer(b.data(), b.size_bytes(), c, max_rows);
    }
    py::dict out = columns_to_dict(std::move(c));
    out["records_seen"] = s.records;
    out["dropped_by_row_limit"] = s.over_limit;
    out["walk_error"] = s.walk_error;
    return out;
  }, py::arg("buffer"), py::arg("max_rows") = static_cast<size_t>(-1),
     "Decode a SyntheticBuffer exactly as the tracer decodes CUPTI's buffers.");
}
