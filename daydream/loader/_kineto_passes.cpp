// daydream._kineto, part 2: compiled per-event passes after parsing (same module as _kineto.cpp).
//
// walk_lanes: the layer/phase stack walk of daydream/loader/layers.py (_walk_lane over every CPU
// lane), used by daydream/loader/fast_layers.py.  cpu_slices: the CPU self-time slicing of
// daydream/graph/build.py (_cpu_slices).  Both give exactly the Python functions' results
// (tests/test_fast_loader.py); inputs are range checked, bad ones raise Python exceptions.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace daydream_kineto {

using i64 = int64_t;
using i32 = int32_t;
using i8 = int8_t;

namespace {

template <class T>
py::array_t<T> arr(const std::vector<T>& v) {
  py::array_t<T> out(v.size());
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
  return out;
}

struct StrInterner {
  std::unordered_map<std::string, i32> ids;
  std::vector<const std::string*> items;
  i32 get(const std::string& v) {
    auto it = ids.find(v);
    if (it != ids.end()) return it->second;
    i32 id = i32(items.size());
    auto ins = ids.emplace(v, id).first;
    items.push_back(&ins->first);
    return id;
  }
};

std::vector<std::string> utf8_list(const py::list& l) {
  std::vector<std::string> out;
  out.reserve(l.size());
  for (auto o : l) out.push_back(o.cast<std::string>());
  return out;
}

}  // namespace

// ---- layer walk (daydream/loader/layers.py: _walk_lane over every CPU lane) ----------------------

// Inputs per distinct name (from layers.py's own functions, see fast_layers.py): phase hint, module
// kind (0 none, 1 fixed path, 2 "nn.Module: leaf" nested under the enclosing path) and its text.
py::tuple walk_lanes(py::array_t<i32, py::array::c_style | py::array::forcecast> lane_a,
                     py::array_t<i64, py::array::c_style | py::array::forcecast> start_a,
                     py::array_t<i64, py::array::c_style | py::array::forcecast> dur_a,
                     py::array_t<i8, py::array::c_style | py::array::forcecast> kind_a,
                     py::array_t<i32, py::array::c_style | py::array::forcecast> name_a,
                     py::array_t<bool, py::array::c_style | py::array::forcecast> lane_cpu_a,
                     py::list names_l, py::array_t<i8, py::array::c_style | py::array::forcecast> hint_a,
                     py::array_t<i8, py::array::c_style | py::array::forcecast> modkind_a, py::list modtext_l,
                     int annotation, int backward, int optimizer, int dataloader) {
  const size_t n = size_t(lane_a.size());
  const size_t n_lanes = size_t(lane_cpu_a.size());
  const size_t n_names = names_l.size();
  if (size_t(start_a.size()) != n || size_t(dur_a.size()) != n || size_t(kind_a.size()) != n ||
      size_t(name_a.size()) != n || size_t(hint_a.size()) != n_names || size_t(modkind_a.size()) != n_names ||
      modtext_l.size() != n_names)
    throw std::invalid_argument("walk_lanes: inconsistent lengths");
  const i32* lane = lane_a.data();
  const i64* start = start_a.data();
  const i64* dur = dur_a.data();
  const i8* kind = kind_a.data();
  const i32* name = name_a.data();
  const bool* lane_cpu = lane_cpu_a.data();
  const i8* hint = hint_a.data();
  const i8* modkind = modkind_a.data();
  std::vector<std::string> names = utf8_list(names_l), modtext = utf8_list(modtext_l);
  for (size_t i = 0; i < n; ++i)
    if (lane[i] < 0 || size_t(lane[i]) >= n_lanes || name[i] < 0 || size_t(name[i]) >= n_names)
      throw std::invalid_argument("walk_lanes: lane or name out of range");

  py::array_t<i32> layer_o(n);
  py::array_t<i8> phase_o(n);
  py::array_t<i64> top_o(n);
  py::array_t<bool> paths_o(n);
  i32* out_layer = layer_o.mutable_data();
  i8* out_phase = phase_o.mutable_data();
  i64* out_top = top_o.mutable_data();
  bool* with_path = paths_o.mutable_data();
  std::vector<bool> backward_lane(n_lanes, false);
  StrInterner layers;
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) {  // rows outside CPU lanes keep the caller's values
      out_layer[i] = -1; out_phase[i] = -1; out_top[i] = -1; with_path[i] = false;
    }
    // rows of each lane, in row order (counting sort)
    std::vector<size_t> first(n_lanes + 1, 0), rows(n);
    for (size_t i = 0; i < n; ++i) first[size_t(lane[i]) + 1]++;
    for (size_t l = 0; l < n_lanes; ++l) first[l + 1] += first[l];
    std::vector<size_t> fill(first.begin(), first.end() - 1);
    for (size_t i = 0; i < n; ++i) rows[fill[size_t(lane[i])]++] = i;

    StrInterner paths;                    // module paths, by creation
    std::vector<i32> path_layer;          // path id -> layer id (-1: not yet)
    std::vector<i32> name_layer(n_names, -1), fixed_path(n_names, -1), name_path(n_names, -1);
    std::unordered_map<i64, i32> nested;  // (parent path, name) -> path
    auto path_of = [&](const std::string& v) {
      i32 id = paths.get(v);
      if (size_t(id) >= path_layer.size()) path_layer.push_back(-1);
      return id;
    };
    struct Frame { i64 end; i32 path; i8 ph; i32 top; i64 top_i; };
    std::vector<Frame> stack;
    for (size_t l = 0; l < n_lanes; ++l) {
      if (!lane_cpu[l]) continue;
      stack.clear();
      size_t n_top = 0, n_backward_top = 0;
      for (size_t r = first[l]; r < first[l + 1]; ++r) {
        size_t i = rows[r];
        i64 s = start[i];
        while (!stack.empty() && stack.back().end <= s) stack.pop_back();
        i32 path = -1, top = -1;
        i8 ph = -1;
        i64 top_i = -1;
        if (!stack.empty()) { path = stack.back().path; ph = stack.back().ph; top = stack.back().top; top_i = stack.back().top_i; }
        i32 nm = name[i];
        i8 h = hint[nm];
        if (h != -1) ph = h;
        i32 mod = -1;
        if (kind[i] == annotation) {
          if (modkind[nm] == 1) {
            if (fixed_path[nm] < 0) fixed_path[nm] = path_of(modtext[nm]);
            mod = fixed_path[nm];
          } else if (modkind[nm] == 2) {
            if (path >= 0 && !paths.items[size_t(path)]->empty()) {  // Python: f"{parent}.{leaf}" if parent
              i64 key = (i64(path) << 32) | i64(uint32_t(nm));
              auto it = nested.find(key);
              if (it == nested.end()) {
                std::string v = *paths.items[size_t(path)];
                v += '.';
                v += modtext[nm];
                it = nested.emplace(key, path_of(v)).first;
              }
              mod = it->second;
            } else {
              if (fixed_path[nm] < 0) fixed_path[nm] = path_of(modtext[nm]);
              mod = fixed_path[nm];
            }
          }
        }
        if (mod < 0 && path < 0 && (h == optimizer || h == dataloader)) {
          if (name_path[nm] < 0) name_path[nm] = path_of(names[size_t(nm)]);
          mod = name_path[nm];
        }
        if (mod >= 0) path = mod;
        if (top < 0 && kind[i] != annotation) {
          if (name_layer[nm] < 0) name_layer[nm] = layers.get(names[size_t(nm)]);
          top = name_layer[nm];
          top_i = i64(i);
          n_top++;
          n_backward_top += h == backward;
        }
        if (path >= 0) {
          if (path_layer[size_t(path)] < 0) path_layer[size_t(path)] = layers.get(*paths.items[size_t(path)]);
          out_layer[i] = path_layer[size_t(path)];
          with_path[i] = true;
        } else {
          out_layer[i] = top;
        }
        out_phase[i] = ph;
        out_top[i] = top_i;
        stack.push_back({s + dur[i], path, ph, top, top_i});
      }
      backward_lane[l] = n_top > 0 && 2 * n_backward_top >= n_top;
    }
  }
  py::list layer_names, bwd;
  for (auto* v : layers.items) {
    PyObject* o = PyUnicode_DecodeUTF8(v->data(), Py_ssize_t(v->size()), "strict");
    if (!o) throw py::error_already_set();
    layer_names.append(py::reinterpret_steal<py::object>(o));
  }
  for (size_t l = 0; l < n_lanes; ++l) if (backward_lane[l]) bwd.append(l);
  return py::make_tuple(layer_o, phase_o, top_o, paths_o, bwd, layer_names);
}

// ---- CPU self-time slices (daydream/graph/build.py: _cpu_slices) --------------------------------

// A thread's nested ops (rows `idx`, in start order, longest first) split into self-time slices:
// an op with children becomes the slices of its own time between them; a leaf is one slice; a
// zero-length op is a slice of its own.  Returns (event, start, end) arrays.
py::tuple cpu_slices(py::array_t<i64, py::array::c_style | py::array::forcecast> idx_a,
                     py::array_t<i64, py::array::c_style | py::array::forcecast> start_a,
                     py::array_t<i64, py::array::c_style | py::array::forcecast> end_a) {
  const size_t m = size_t(idx_a.size()), n = size_t(start_a.size());
  if (size_t(end_a.size()) != n) throw std::invalid_argument("cpu_slices: start and end differ in length");
  const i64* idx = idx_a.data();
  const i64* start = start_a.data();
  const i64* end = end_a.data();
  for (size_t k = 0; k < m; ++k)
    if (idx[k] < 0 || size_t(idx[k]) >= n) throw py::index_error("cpu_slices: row out of range");
  std::vector<i64> ev, ss, ee;
  {
    py::gil_scoped_release nogil;
    ev.reserve(2 * m); ss.reserve(2 * m); ee.reserve(2 * m);
    auto emit = [&](i64 i, i64 a, i64 b) { ev.push_back(i); ss.push_back(a); ee.push_back(b); };
    std::vector<std::pair<i64, i64>> stack;  // open ops: (end, row)
    i64 cursor = 0;
    bool have_cursor = false;
    for (size_t k = 0; k < m; ++k) {
      i64 i = idx[k], a = start[size_t(i)], b = end[size_t(i)];
      while (!stack.empty() && stack.back().first <= a) {
        auto [top_end, top] = stack.back();
        stack.pop_back();
        if (top_end > cursor) { emit(top, cursor, top_end); cursor = top_end; }
      }
      if (!stack.empty() && a > cursor) emit(stack.back().second, cursor, a);
      cursor = have_cursor ? std::max(cursor, a) : a;
      have_cursor = true;
      if (b <= a) { emit(i, a, a); continue; }  // zero-length op: a task of its own
      stack.emplace_back(b, i);
    }
    while (!stack.empty()) {
      auto [top_end, top] = stack.back();
      stack.pop_back();
      if (top_end > cursor) { emit(top, cursor, top_end); cursor = top_end; }
    }
  }
  return py::make_tuple(arr(ev), arr(ss), arr(ee));
}

}  // namespace daydream_kineto
