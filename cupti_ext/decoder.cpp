#include "decoder.hpp"

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace daydream {

namespace {

// Reads a record as its struct; memcpy keeps this free of alignment and
// aliasing assumptions about the buffer.
template <typename T>
T load(const CUpti_Activity* record) {
  T value;
  std::memcpy(&value, record, sizeof(T));
  return value;
}

// A new row with the fields every timed record has: kind, interval and
// correlation id.
template <typename R>
size_t timed_row(const R& r, Columns& c) {
  const size_t i = c.append_blank();
  c.kind[i] = static_cast<int16_t>(r.kind);
  c.start_ns[i] = static_cast<int64_t>(r.start);
  c.end_ns[i] = static_cast<int64_t>(r.end);
  c.correlation_id[i] = r.correlationId;
  return i;
}

// A new row for work on a device stream: the timed fields, where it ran and
// the CUDA graph node it belongs to.
template <typename R>
size_t device_row(const R& r, Columns& c) {
  const size_t i = timed_row(r, c);
  c.device_id[i] = static_cast<int32_t>(r.deviceId);
  c.context_id[i] = r.contextId;
  c.stream_id[i] = r.streamId;
  c.graph_id[i] = r.graphId;
  c.graph_node_id[i] = r.graphNodeId;
  return i;
}

// The fields both memcpy record kinds have beyond device_row's.
template <typename R>
size_t copy_row(const R& r, Columns& c) {
  const size_t i = device_row(r, c);
  c.bytes[i] = static_cast<int64_t>(r.bytes);
  c.copy_kind[i] = static_cast<int8_t>(r.copyKind);
  c.src_kind[i] = static_cast<int8_t>(r.srcKind);
  c.dst_kind[i] = static_cast<int8_t>(r.dstKind);
  c.flags[i] = r.flags;
  return i;
}

void decode_kernel(const KernelRecord& r, Columns& c) {
  const size_t i = device_row(r, c);
  c.name_id[i] = c.strings.intern(r.name);
  c.grid_x[i] = r.gridX;
  c.grid_y[i] = r.gridY;
  c.grid_z[i] = r.gridZ;
  c.block_x[i] = r.blockX;
  c.block_y[i] = r.blockY;
  c.block_z[i] = r.blockZ;
  c.static_shared_bytes[i] = r.staticSharedMemory;
  c.dynamic_shared_bytes[i] = r.dynamicSharedMemory;
  c.registers_per_thread[i] = r.registersPerThread;
}

void decode_memcpy(const MemcpyRecord& r, Columns& c) { copy_row(r, c); }

void decode_memcpy_ptop(const MemcpyPtoPRecord& r, Columns& c) {
  const size_t i = copy_row(r, c);
  c.src_device_id[i] = static_cast<int32_t>(r.srcDeviceId);
  c.dst_device_id[i] = static_cast<int32_t>(r.dstDeviceId);
}

void decode_memset(const MemsetRecord& r, Columns& c) {
  const size_t i = device_row(r, c);
  c.bytes[i] = static_cast<int64_t>(r.bytes);
  c.memory_kind[i] = static_cast<int8_t>(r.memoryKind);
  c.memset_value[i] = r.value;
  c.flags[i] = r.flags;
}

void decode_api(const ApiRecord& r, Columns& c) {
  const size_t i = timed_row(r, c);
  c.cbid[i] = static_cast<int32_t>(r.cbid);
  c.process_id[i] = r.processId;
  c.thread_id[i] = r.threadId;
  c.return_value[i] = r.returnValue;
  c.name_id[i] = c.strings.intern(
      api_name(r.kind == CUPTI_ACTIVITY_KIND_DRIVER, static_cast<uint32_t>(r.cbid)));
}

void decode_sync(const SyncRecord& r, Columns& c) {
  const size_t i = timed_row(r, c);
  c.context_id[i] = r.contextId;
  // Not applicable (e.g. context synchronisation) becomes -1.
  c.stream_id[i] = r.streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? -1 : static_cast<int64_t>(r.streamId);
  c.sync_type[i] = static_cast<int8_t>(r.type);
  c.cuda_event_id[i] = r.cudaEventId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? -1 : static_cast<int64_t>(r.cudaEventId);
  c.return_value[i] = r.returnValue;
}

void decode_external(const ExternalCorrelationRecord& r, Columns& c) {
  const size_t i = c.append_blank();
  c.kind[i] = static_cast<int16_t>(r.kind);
  c.correlation_id[i] = r.correlationId;
  c.external_kind[i] = static_cast<int8_t>(r.externalKind);
  c.external_id[i] = r.externalId;
}

}  // namespace

const char* api_name(bool driver, uint32_t cbid) {
  // cuptiGetCallbackName needs no device.  CUPTI's names carry the API
  // version ("cudaLaunchKernel_v7000"); Kineto traces do not, so it is cut.
  // Cached so the hot path is one lookup; leaked on purpose (see tracer.cpp).
  static std::mutex mu;
  static auto* cache = new std::unordered_map<uint64_t, std::string>();
  const uint64_t key = (static_cast<uint64_t>(driver) << 32) | cbid;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it == cache->end()) {
    const char* raw = nullptr;
    const CUpti_CallbackDomain domain =
        driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
    std::string name;
    if (cuptiGetCallbackName(domain, cbid, &raw) == CUPTI_SUCCESS && raw != nullptr) {
      name = raw;
      const size_t cut = name.rfind("_v");
      if (cut != std::string::npos && cut + 2 < name.size() &&
          name.find_first_not_of("0123456789", cut + 2) == std::string::npos) {
        name.resize(cut);
      }
    }
    it = cache->emplace(key, std::move(name)).first;
  }
  return it->second.empty() ? nullptr : it->second.c_str();
}

std::vector<uint32_t> api_cbids(bool driver, const std::vector<std::string>& names) {
  const uint32_t size = driver ? static_cast<uint32_t>(CUPTI_DRIVER_TRACE_CBID_SIZE)
                               : static_cast<uint32_t>(CUPTI_RUNTIME_TRACE_CBID_SIZE);
  std::vector<uint32_t> out;
  for (uint32_t cbid = 1; cbid < size; ++cbid) {
    const char* name = api_name(driver, cbid);
    if (name == nullptr) continue;
    for (const std::string& wanted : names) {
      if (wanted == name) {
        out.push_back(cbid);
        break;
      }
    }
  }
  return out;
}

bool decode_record(const CUpti_Activity* record, Columns& out) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      decode_kernel(load<KernelRecord>(record), out);
      return true;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      decode_memcpy(load<MemcpyRecord>(record), out);
      return true;
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      decode_memcpy_ptop(load<MemcpyPtoPRecord>(record), out);
      return true;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      decode_memset(load<MemsetRecord>(record), out);
      return true;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      decode_api(load<ApiRecord>(record), out);
      return true;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      decode_sync(load<SyncRecord>(record), out);
      return true;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      decode_external(load<ExternalCorrelationRecord>(record), out);
      return true;
    default:
      out.skipped_by_kind[static_cast<int32_t>(record->kind)] += 1;
      return false;
  }
}

DecodeStats decode_buffer(uint8_t* buffer, size_t valid_bytes, Columns& out,
                          size_t max_rows) {
  DecodeStats stats;
  if (buffer == nullptr || valid_bytes == 0) return stats;
  CUpti_Activity* record = nullptr;
  while (true) {
    const CUptiResult status = cuptiActivityGetNextRecord(buffer, valid_bytes, &record);
    if (status == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of buffer
    if (status != CUPTI_SUCCESS) {
      stats.walk_error = static_cast<int>(status);
      break;
    }
    stats.records += 1;
    if (out.size() >= max_rows) {
      stats.over_limit += 1;
      continue;
    }
    if (decode_record(record, out)) {
      stats.rows += 1;
    } else {
      stats.skipped += 1;
    }
  }
  return stats;
}

}  // namespace daydream
