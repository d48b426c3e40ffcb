// Columnar storage for decoded CUPTI activity records.
//
// One row per record, every kind in the same table.  A column that does not
// apply to a record's kind holds the sentinel named in DAYDREAM_COLUMNS (-1
// for signed ids and sizes, 0 for unsigned ids that CUPTI itself never sets
// to 0).  The X-macro keeps the C++ struct, the sentinel defaults and the
// Python conversion in one list.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace daydream {

// X(type, name, sentinel)
#define DAYDREAM_COLUMNS(X)                 \
  X(int16_t, kind, -1)                      \
  X(int64_t, start_ns, -1)                  \
  X(int64_t, end_ns, -1)                    \
  X(uint32_t, correlation_id, 0)            \
  X(int32_t, device_id, -1)                 \
  X(int64_t, context_id, -1)                \
  X(int64_t, stream_id, -1)                 \
  X(int32_t, name_id, -1)                   \
  X(int64_t, bytes, -1)                     \
  X(int8_t, copy_kind, -1)                  \
  X(int8_t, src_kind, -1)                   \
  X(int8_t, dst_kind, -1)                   \
  X(int32_t, src_device_id, -1)             \
  X(int32_t, dst_device_id, -1)             \
  X(int8_t, memory_kind, -1)                \
  X(int64_t, memset_value, -1)              \
  X(int32_t, flags, 0)                      \
  X(int32_t, grid_x, -1)                    \
  X(int32_t, grid_y, -1)                    \
  X(int32_t, grid_z, -1)                    \
  X(int32_t, block_x, -1)                   \
  X(int32_t, block_y, -1)                   \
  X(int32_t, block_z, -1)                   \
  X(int32_t, static_shared_bytes, -1)       \
  X(int32_t, dynamic_shared_bytes, -1)      \
  X(int32_t, registers_per_thread, -1)      \
  X(int64_t, graph_id, -1)                  \
  X(uint64_t, graph_node_id, 0)             \
  X(int32_t, cbid, -1)                      \
  X(int64_t, process_id, -1)                \
  X(int64_t, thread_id, -1)                 \
  X(int64_t, return_value, -1)              \
  X(int8_t, sync_type, -1)                  \
  X(int64_t, cuda_event_id, -1)             \
  X(int8_t, external_kind, -1)              \
  X(uint64_t, external_id, 0)

// Interns strings: kernel and API names are stored once and referenced by
// index, so the Python side gets one list of unique names plus an int array.
class StringTable {
 public:
  int32_t intern(const char* s) {
    if (s == nullptr) return -1;
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(names_.size());
    names_.emplace_back(s);
    index_.emplace(names_.back(), id);
    return id;
  }
  const std::vector<std::string>& names() const { return names_; }
  void clear() {
    names_.clear();
    index_.clear();
  }

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> index_;
};

struct Columns {
#define DAYDREAM_DECLARE(type, name, sentinel) std::vector<type> name;
  DAYDREAM_COLUMNS(DAYDREAM_DECLARE)
#undef DAYDREAM_DECLARE

  StringTable strings;
  // Records of kinds the decoder does not turn into rows, by CUPTI kind.
  std::unordered_map<int32_t, uint64_t> skipped_by_kind;

  size_t size() const { return kind.size(); }

  // Appends one row holding every column's sentinel; returns its index.
  size_t append_blank() {
#define DAYDREAM_PUSH(type, name, sentinel) name.push_back(static_cast<type>(sentinel));
    DAYDREAM_COLUMNS(DAYDREAM_PUSH)
#undef DAYDREAM_PUSH
    return kind.size() - 1;
  }

  void clear() {
#define DAYDREAM_CLEAR(type, name, sentinel) name.clear();
    DAYDREAM_COLUMNS(DAYDREAM_CLEAR)
#undef DAYDREAM_CLEAR
    strings.clear();
    skipped_by_kind.clear();
  }
};

}  // namespace daydream
