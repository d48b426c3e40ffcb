// Decoding CUPTI activity buffers into columns.  Pure: no global state, no
// CUDA device needed; fed either real CUPTI buffers or synthetic ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "columns.hpp"
#include "records.hpp"

namespace daydream {

struct DecodeStats {
  uint64_t records = 0;        // records seen in the buffer
  uint64_t rows = 0;           // rows appended to the columns
  uint64_t skipped = 0;        // records of kinds that are not decoded
  uint64_t over_limit = 0;     // rows not appended because of max_rows
  int walk_error = 0;          // CUPTI result that stopped the walk, 0 if none
};

// Appends one row for ``record`` (if its kind is decoded) to ``out``.
// Returns true when a row was appended.
bool decode_record(const CUpti_Activity* record, Columns& out);

// Walks ``buffer`` with cuptiActivityGetNextRecord and decodes every record.
// At most ``max_rows`` rows are held in ``out`` in total; the rest are counted
// in ``over_limit``.
DecodeStats decode_buffer(uint8_t* buffer, size_t valid_bytes, Columns& out,
                          size_t max_rows);

// Name of a runtime (or driver) API callback id, or nullptr.
const char* api_name(bool driver, uint32_t cbid);

// Callback ids of the runtime (or driver) APIs named, version suffix cut as in
// api_name(); names CUPTI does not know are left out.  Needs no device.
std::vector<uint32_t> api_cbids(bool driver, const std::vector<std::string>& names);

}  // namespace daydream
