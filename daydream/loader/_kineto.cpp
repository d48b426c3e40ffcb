// daydream._kineto: a compiled scanner from Kineto/Chrome-trace JSON bytes to event columns.
//
// It implements exactly what daydream/loader/kineto.py (the reference) does per event, for
// strict RFC 8259 JSON only, with no per-event Python object.  Whatever it does not reproduce
// exactly (invalid JSON, NaN, lone surrogates, string-typed timestamps, integers beyond 64 bits,
// duplicate keys in an event, non-ASCII categories, very deep nesting, ...) makes it answer
// {"fallback": reason}; the caller then runs the reference loader on the same bytes, so results
// and error messages are identical by construction.  Every read is bounds checked: malformed
// bytes can only end in a fallback, never in a crash.
//
// Work that needs Python semantics on few distinct values (lanes from pid/tid, thread names,
// input bytes, FLOPs and signatures from shapes) is handed back as interned raw JSON tokens; see
// daydream/loader/fast.py.  The passes after parsing (layer walk, CPU self-time slices) live in
// _kineto_passes.cpp.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

using i64 = int64_t;
using i32 = int32_t;
using i8 = int8_t;

struct Fallback {
  const char* why;
};

[[noreturn]] void fallback(const char* why) { throw Fallback{why}; }

enum TokType : uint8_t { MISSING = 0, NUL, TRUE_, FALSE_, INT, FLOAT, STR, OBJ, ARR };

// A JSON value's token.  Plain data (no initialisers: events keep two dozen of them, set per
// event); every field but `type` is meaningful only when `type` says a value is there.
struct Tok {
  uint8_t type;   // TokType
  bool esc;       // string with escapes
  bool big;       // integer beyond int64
  size_t b, e;    // raw span (strings: including the quotes)
  i64 iv;         // INT value
};

constexpr Tok MISSING_TOK{MISSING, false, false, 0, 0, 0};

// Event kinds, as daydream.model.EventKind.
enum Kind : i8 { CPU_OP = 0, RUNTIME = 1, KERNEL = 2, MEMCPY = 3, MEMSET = 4, ANNOTATION = 7, NONE = -1 };

constexpr int MAX_DEPTH = 256;

struct Parser {
  const char* s;
  size_t n;
  size_t i = 0;

  void ws() {
    while (i < n) {
      char c = s[i];
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') ++i; else break;
    }
  }
  char peek() {
    if (i >= n) fallback("truncated JSON");
    return s[i];
  }
  void expect(char c) {
    if (peek() != c) fallback("invalid JSON");
    ++i;
  }
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  unsigned u4(size_t at) {
    if (at + 4 > n) fallback("truncated JSON");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      int h = hex(s[at + k]);
      if (h < 0) fallback("invalid JSON escape");
      v = v * 16 + unsigned(h);
    }
    return v;
  }
  // One UTF-8 sequence starting at s[i] (>= 0x80); strict (no surrogates, no overlongs).
  void utf8() {
    unsigned char c = (unsigned char)s[i];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else fallback("invalid UTF-8");
    if (i + len > n) fallback("truncated JSON");
    unsigned char c1 = (unsigned char)s[i + 1];
    if (c1 < lo || c1 > hi) fallback("invalid UTF-8");
    for (size_t k = 2; k < len; ++k) {
      unsigned char ck = (unsigned char)s[i + k];
      if (ck < 0x80 || ck > 0xBF) fallback("invalid UTF-8");
    }
    i += len;
  }
  Tok str() {  // at '"'
    Tok t{STR, false, false, i++, 0, 0};
    for (;;) {
      // fast path over plain ASCII: 8 bytes at a time, then byte by byte
      while (i + 8 <= n) {
        uint64_t x;
        std::memcpy(&x, s + i, 8);
        constexpr uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
        uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
        uint64_t special = ((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x) | x;
        if (special & highs) break;
        i += 8;
      }
      while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++i;
      }
      if (i >= n) fallback("truncated JSON");
      unsigned char c = (unsigned char)s[i];
      if (c == '"') { ++i; t.e = i; return t; }
      if (c < 0x20) fallback("control character in JSON string");
      if (c >= 0x80) { utf8(); continue; }
      // backslash
      t.esc = true;
      if (i + 1 >= n) fallback("truncated JSON");
      char x = s[i + 1];
      if (x == 'u') {
        unsigned v = u4(i + 2);
        i += 6;
        if (v >= 0xD800 && v <= 0xDBFF) {
          if (i + 1 < n && s[i] == '\\' && s[i + 1] == 'u') {
            unsigned w = u4(i + 2);
            if (w < 0xDC00 || w > 0xDFFF) fallback("lone surrogate in JSON string");
            i += 6;
          } else {
            fallback("lone surrogate in JSON string");
          }
        } else if (v >= 0xDC00 && v <= 0xDFFF) {
          fallback("lone surrogate in JSON string");
        }
      } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' || x == 'r' || x == 't') {
        i += 2;
      } else {
        fallback("invalid JSON escape");
      }
    }
  }
  Tok num() {
    Tok t{INT, false, false, i, 0, 0};
    bool neg = false;
    if (peek() == '-') { neg = true; ++i; }
    if (i >= n) fallback("truncated JSON");
    if (s[i] == '0') {
      ++i;
    } else if (s[i] >= '1' && s[i] <= '9') {
      while (i < n && s[i] >= '0' && s[i] <= '9') ++i;
    } else {
      fallback("invalid JSON number");
    }
    bool is_float = false;
    if (i < n && s[i] == '.') {
      is_float = true;
      ++i;
      size_t d = i;
      while (i < n && s[i] >= '0' && s[i] <= '9') ++i;
      if (i == d) fallback("invalid JSON number");
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
      is_float = true;
      ++i;
      if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
      size_t d = i;
      while (i < n && s[i] >= '0' && s[i] <= '9') ++i;
      if (i == d) fallback("invalid JSON number");
    }
    t.e = i;
    if (is_float) {
      t.type = FLOAT;
    } else {
      t.type = INT;
      const char* p = s + t.b + (neg ? 1 : 0);
      size_t len = t.e - t.b - (neg ? 1 : 0);
      // accumulate negatively so INT64_MIN fits
      i64 v = 0;
      for (size_t k = 0; k < len; ++k) {
        int d = p[k] - '0';
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_sub_overflow(v, d, &v)) t.big = true;
      }
      if (!t.big && !neg) {
        if (v == INT64_MIN) t.big = true; else v = -v;
      }
      // orjson refuses integers beyond 64 bits, and the stdlib those beyond Python's digit limit:
      // the reference decides what such a document is.
      if (t.big) fallback("integer beyond 64 bits");
      t.iv = v;
    }
    return t;
  }
  void lit(const char* w, size_t len) {
    if (i + len > n || std::memcmp(s + i, w, len) != 0) fallback("invalid JSON literal");
    i += len;
  }
  // Any value: validated and skipped; returns its token.
  Tok value(int depth) {
    ws();
    char c = peek();
    Tok t = MISSING_TOK;
    switch (c) {
      case '"': return str();
      case '{':
      case '[': {
        if (depth >= MAX_DEPTH) fallback("JSON nested too deeply");
        t.type = c == '{' ? OBJ : ARR;
        t.b = i;
        container(depth + 1);
        t.e = i;
        return t;
      }
      case 't': t.b = i; lit("true", 4); t.type = TRUE_; t.e = i; return t;
      case 'f': t.b = i; lit("false", 5); t.type = FALSE_; t.e = i; return t;
      case 'n': t.b = i; lit("null", 4); t.type = NUL; t.e = i; return t;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return num();
        fallback("invalid JSON value");
    }
  }
  void container(int depth) {  // at '{' or '['
    char open = s[i++];
    ws();
    char close = open == '{' ? '}' : ']';
    if (peek() == close) { ++i; return; }
    for (;;) {
      if (open == '{') {
        ws();
        if (peek() != '"') fallback("invalid JSON object key");
        str();
        ws();
        expect(':');
      }
      value(depth);
      ws();
      char c = peek();
      ++i;
      if (c == ',') continue;
      if (c == close) return;
      fallback("invalid JSON separator");
    }
  }
};

// ---- string helpers ---------------------------------------------------------------------------

void put_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) out += char(cp);
  else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F));
  }
}

// Decoded content of a (validated) string token.
std::string_view decode(const char* s, const Tok& t, std::string& buf) {
  std::string_view raw(s + t.b + 1, t.e - t.b - 2);
  if (!t.esc) return raw;
  buf.clear();
  for (size_t k = 0; k < raw.size();) {
    char c = raw[k];
    if (c != '\\') { buf += c; ++k; continue; }
    char x = raw[k + 1];
    switch (x) {
      case 'b': buf += '\b'; k += 2;
            break;
      case 'f': buf += '\f'; k += 2;
            break;
      case 'n': buf += '\n'; k += 2;
            break;
      case 'r': buf += '\r'; k += 2;
            break;
      case 't': buf += '\t'; k += 2;
            break;
      case 'u': {
        unsigned v = 0;
        for (int q = 0; q < 4; ++q) v = v * 16 + unsigned(Parser::hex(raw[k + 2 + q]));
        k += 6;
        if (v >= 0xD800 && v <= 0xDBFF) {
          unsigned w = 0;
          for (int q = 0; q < 4; ++q) w = w * 16 + unsigned(Parser::hex(raw[k + 2 + q]));
          k += 6;
          v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
        }
        put_utf8(buf, v);
        break;
      }
      default: buf += x; k += 2; break;  // " \ /
    }
  }
  return buf;
}

bool ascii(std::string_view v) {
  for (unsigned char c : v) if (c >= 0x80) return false;
  return true;
}

// Python's int(str) for what it can be sure of; `ok` false means ValueError.
i64 int_of_string(std::string_view v, bool& ok) {
  if (!ascii(v)) fallback("non-ASCII numeric string");
  size_t a = 0, b = v.size();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (a < b && space(v[a])) ++a;
  while (b > a && space(v[b - 1])) --b;
  std::string_view d = v.substr(a, b - a);
  if (d.find('_') != std::string_view::npos) fallback("underscore in numeric string");
  bool neg = false;
  if (!d.empty() && (d[0] == '+' || d[0] == '-')) { neg = d[0] == '-'; d.remove_prefix(1); }
  if (d.empty()) { ok = false; return 0; }
  i64 x = 0;
  for (char c : d) {
    if (c < '0' || c > '9') { ok = false; return 0; }
    if (__builtin_mul_overflow(x, 10, &x) || __builtin_sub_overflow(x, c - '0', &x)) fallback("integer beyond 64 bits");
  }
  if (!neg) {
    if (x == INT64_MIN) fallback("integer beyond 64 bits");
    x = -x;
  }
  ok = true;
  return x;
}

double float_of(const char* s, const Tok& t) {
  double d = 0;
  auto r = std::from_chars(s + t.b, s + t.e, d);
  if (r.ec != std::errc() || !std::isfinite(d)) fallback("float out of range");
  return d;
}


// Both ends of the ranges below where the reference's edge rules (clamping, booleans) apply:
// values there make the whole document go through the reference loader.
constexpr i64 MAX_COUNT = i64(1) << 53;     // kineto.MAX_COUNT
constexpr i64 MAX_TIME_NS = i64(1) << 62;   // kineto.MAX_TIME_NS

i64 counted(i64 v) {
  if (v < -MAX_COUNT || v > MAX_COUNT) fallback("count beyond 2**53");
  return v;
}

// kineto._as_int: int(v), default on None / TypeError / ValueError.
i64 as_int(const char* s, const Tok& t, i64 dflt, std::string& buf) {
  switch (t.type) {
    case INT:
      if (t.big) fallback("integer beyond 64 bits");
      return counted(t.iv);
    case FLOAT: {
      double d = float_of(s, t);
      if (!(std::fabs(d) <= double(MAX_COUNT))) fallback("count beyond 2**53");
      return i64(d);
    }
    case TRUE_: case FALSE_: fallback("boolean where a number is expected");
    case STR: {
      bool ok;
      i64 v = int_of_string(decode(s, t, buf), ok);
      return ok ? counted(v) : dflt;
    }
    default: return dflt;  // missing, null, object, array
  }
}

// kineto.us_to_ns; false where the reference counts a repair (missing, null, object, array).
bool us_to_ns(const char* s, const Tok& t, i64& out) {
  switch (t.type) {
    case INT:
      if (t.big || __builtin_mul_overflow(t.iv, i64(1000), &out)) fallback("timestamp beyond 64 bits");
      break;
    case FLOAT: {
      double d = float_of(s, t);
      if (!(std::fabs(d) <= double(MAX_TIME_NS / 1000))) fallback("timestamp out of range");
      i64 whole = i64(d);
      double frac = (d - double(whole)) * 1000.0;
      out = whole * 1000 + i64(std::nearbyint(frac));  // round half to even, as Python's round()
      break;
    }
    case MISSING: case NUL: case OBJ: case ARR: return false;
    default: fallback("non-numeric timestamp");  // strings and booleans: Python converts some of them
  }
  if (out < -MAX_TIME_NS || out > MAX_TIME_NS) fallback("timestamp out of range");
  return true;
}

// pid / tid: numbers and strings as the reference keeps them; anything else goes to it.
void check_id(const Tok& t) {
  if (t.type == FLOAT || t.type == TRUE_ || t.type == FALSE_ || t.type == OBJ || t.type == ARR || t.big)
    fallback("pid/tid neither an integer nor a string");
}

// ---- interning ------------------------------------------------------------------------------------

struct Interner {
  std::unordered_map<std::string_view, i32> ids;
  std::deque<std::string> owned;
  std::vector<std::string_view> items;
  // `v` must outlive the interner unless `copy`.
  i32 get(std::string_view v, bool copy) {
    auto it = ids.find(v);
    if (it != ids.end()) return it->second;
    if (copy) { owned.emplace_back(v); v = owned.back(); }
    i32 id = i32(items.size());
    items.push_back(v);
    ids.emplace(v, id);
    return id;
  }
};

struct KeyHash {
  size_t operator()(const std::array<i32, 5>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (i32 x : k) { h ^= uint32_t(x); h *= 1099511628211ull; }
    return size_t(h);
  }
};

struct TupleInterner {
  std::unordered_map<std::array<i32, 5>, i32, KeyHash> ids;
  std::vector<std::array<i32, 5>> items;
  i32 get(const std::array<i32, 5>& k) {
    auto it = ids.find(k);
    if (it != ids.end()) return it->second;
    i32 id = i32(items.size());
    items.push_back(k);
    ids.emplace(k, id);
    return id;
  }
};

// ---- event fields -------------------------------------------------------------------------------

enum EvKey { K_PH, K_CAT, K_NAME, K_TS, K_DUR, K_PID, K_TID, K_ID, K_ARGS, N_EVKEYS };
enum ArgKey { A_CORR, A_EXT, A_EXT_LOWER, A_BYTES, A_DEVICE, A_STREAM, A_SEQ, A_NELEMS, A_DTYPE, A_FLOPS,
              A_DIMS, A_TYPES, A_STRIDES, A_CONCRETE, N_ARGKEYS };

template <size_t N>
inline bool is(std::string_view k, const char (&lit)[N]) {  // k == lit, inlined (size checked by the caller)
  return __builtin_memcmp(k.data(), lit, N - 1) == 0;
}

int ev_key(std::string_view k) {
  switch (k.size()) {
    case 2: if (is(k, "ph")) return K_PH; if (is(k, "ts")) return K_TS; if (is(k, "id")) return K_ID;
            break;
    case 3: if (is(k, "cat")) return K_CAT; if (is(k, "dur")) return K_DUR; if (is(k, "pid")) return K_PID;
            if (is(k, "tid")) return K_TID;
            break;
    case 4: if (is(k, "name")) return K_NAME; if (is(k, "args")) return K_ARGS;
            break;
  }
  return -1;
}

int arg_key(std::string_view k) {
  switch (k.size()) {
    case 5: if (is(k, "bytes")) return A_BYTES; if (is(k, "dtype")) return A_DTYPE; if (is(k, "flops")) return A_FLOPS;
            break;
    case 6: if (is(k, "device")) return A_DEVICE; if (is(k, "stream")) return A_STREAM;
            break;
    case 10: if (is(k, "Input Dims")) return A_DIMS; if (is(k, "Input type")) return A_TYPES;
            break;
    case 11: if (is(k, "correlation")) return A_CORR; if (is(k, "External id")) return A_EXT;
             if (is(k, "external id")) return A_EXT_LOWER;
            break;
    case 13: if (is(k, "In msg nelems")) return A_NELEMS; if (is(k, "Input Strides")) return A_STRIDES;
            break;
    case 15: if (is(k, "Sequence number")) return A_SEQ; if (is(k, "Concrete Inputs")) return A_CONCRETE;
            break;
  }
  return -1;
}

Kind category_kind(std::string_view c, bool& gpu_cat) {
  gpu_cat = false;
  switch (c.size()) {
    case 6: if (is(c, "cpu_op")) return CPU_OP; if (is(c, "kernel")) return KERNEL; if (is(c, "memcpy")) return MEMCPY;
            if (is(c, "memset")) return MEMSET;
            if (is(c, "driver")) return RUNTIME;
            break;
    case 7: if (is(c, "runtime")) return RUNTIME;
            break;
    case 8: if (is(c, "operator")) return CPU_OP;
            break;
    case 10: if (is(c, "gpu_memcpy")) return MEMCPY; if (is(c, "gpu_memset")) return MEMSET;
            break;
    case 11: if (is(c, "cuda_driver")) return RUNTIME;
            break;
    case 12: if (is(c, "cuda_runtime")) return RUNTIME;
            break;
    case 15: if (is(c, "user_annotation")) return ANNOTATION; if (is(c, "python_function")) return ANNOTATION;
            break;
    case 19: if (is(c, "gpu_user_annotation")) { gpu_cat = true; return ANNOTATION; } break;
  }
  return NONE;
}

i64 dtype_bytes(std::string_view d) {  // kineto._DTYPE_BYTES, default 4
  static const std::pair<const char*, i64> table[] = {
      {"float", 4}, {"float32", 4}, {"half", 2}, {"float16", 2}, {"bfloat16", 2}, {"double", 8}, {"float64", 8},
      {"int8_t", 1}, {"int8", 1}, {"uint8", 1}, {"int32", 4}, {"int", 4}, {"int64", 8}, {"long", 8}};
  for (auto& p : table) if (d == p.first) return p.second;
  return 4;
}

enum Repair { R_NONOBJ, R_NONAME, R_BADTS, R_NEGDUR, R_BADFLOW, N_REPAIRS };

struct Scan {
  const char* s;
  size_t n;
  std::string buf, buf2;
  // columns of kept complete events
  std::vector<i8> kind;
  std::vector<i32> name, lane_key, shape;
  std::vector<i64> start, dur, corr, ext, nbytes, seq, coll;
  Interner names, tokens;
  TupleInterner lane_keys, shapes;
  std::vector<i64> meta_ranges;  // ph == "M" events: begin, end
  // flows: first-seen order of ids
  std::unordered_map<i64, i32> flow_ids;
  std::vector<std::array<i64, 4>> flows;  // s_ts, s_key, f_ts, f_key (-1 key: none yet)
  i64 repairs[N_REPAIRS] = {0, 0, 0, 0, 0};

  i32 tok_id(const Tok& t) {
    if (t.type == MISSING) return -1;
    return tokens.get(std::string_view(s + t.b, t.e - t.b), false);
  }
  // the same as tok_id, remembering the last token of a field (pid and tid repeat from event to event)
  std::string_view last_v[2];
  i32 last_id[2] = {-2, -2};
  i32 tok_id_cached(const Tok& t, int which) {
    if (t.type == MISSING) return -1;
    std::string_view v(s + t.b, t.e - t.b);
    if (last_id[which] >= 0 && v == last_v[which]) return last_id[which];
    last_v[which] = v;
    return last_id[which] = tokens.get(v, false);
  }

  void event(Parser& p) {  // at '{'
    size_t ev_begin = p.i;
    Tok f[N_EVKEYS];
    Tok a[N_ARGKEYS];
    for (auto& t : f) t.type = MISSING;
    for (auto& t : a) t.type = MISSING;
    bool args_obj = false;
    unsigned seen = 0;
    ++p.i;
    p.ws();
    if (p.peek() == '}') {
      ++p.i;
    } else {
      for (;;) {
        p.ws();
        if (p.peek() != '"') fallback("invalid JSON object key");
        Tok kt = p.str();
        p.ws();
        p.expect(':');
        int k = ev_key(decode(s, kt, buf));
        if (k < 0) {
          p.value(2);
        } else {
          if (seen & (1u << k)) fallback("duplicate key in an event");
          seen |= 1u << k;
          if (k == K_ARGS) {
            p.ws();
            if (p.peek() == '{') { args_obj = true; args(p, a); f[k].type = OBJ; } else f[k] = p.value(2);
          } else {
            f[k] = p.value(2);
          }
        }
        p.ws();
        char c = p.peek();
        ++p.i;
        if (c == ',') continue;
        if (c == '}') break;
        fallback("invalid JSON separator");
      }
    }
    if (!args_obj) {
      if (f[K_ARGS].type != MISSING && f[K_ARGS].type != NUL) fallback("args is not an object");
      for (auto& t : a) t.type = MISSING;
    }
    check_id(f[K_PID]);
    check_id(f[K_TID]);
    std::string_view ph;
    if (f[K_PH].type == STR) ph = decode(s, f[K_PH], buf2); else return;
    char low[24];
    std::string_view cat;
    if (f[K_CAT].type == STR) {
      std::string_view c = decode(s, f[K_CAT], buf);
      if (!ascii(c)) fallback("non-ASCII category");
      if (c.size() <= sizeof(low)) {   // longer ones are no category daydream knows
        for (size_t q = 0; q < c.size(); ++q) low[q] = (c[q] >= 'A' && c[q] <= 'Z') ? char(c[q] - 'A' + 'a') : c[q];
        cat = std::string_view(low, c.size());
      } else {
        cat = "?";
      }
    }
    if (ph == "X") complete(f, a, cat);
    else if ((ph == "s" || ph == "f") && cat == "fwdbwd") flow(f, ph[0]);
    else if (ph == "M") { meta_ranges.push_back(i64(ev_begin)); meta_ranges.push_back(i64(p.i)); }
  }

  void args(Parser& p, Tok* a) {  // at '{' of "args"
    unsigned seen = 0;
    ++p.i;
    p.ws();
    if (p.peek() == '}') { ++p.i; return; }
    for (;;) {
      p.ws();
      if (p.peek() != '"') fallback("invalid JSON object key");
      Tok kt = p.str();
      p.ws();
      p.expect(':');
      int k = arg_key(decode(s, kt, buf));
      Tok v = p.value(3);
      if (k >= 0) {
        if (seen & (1u << k)) fallback("duplicate key in event args");
        seen |= 1u << k;
        a[k] = v;
      }
      p.ws();
      char c = p.peek();
      ++p.i;
      if (c == ',') continue;
      if (c == '}') return;
      fallback("invalid JSON separator");
    }
  }

  void complete(Tok* f, Tok* a, std::string_view cat) {
    bool gpu_cat;
    Kind k = category_kind(cat, gpu_cat);
    if (k == NONE) return;
    if (f[K_NAME].type != STR) { repairs[R_NONAME]++; return; }
    i64 ts, du = 0;
    if (!us_to_ns(s, f[K_TS], ts)) { repairs[R_BADTS]++; return; }
    if (f[K_DUR].type != MISSING && !us_to_ns(s, f[K_DUR], du)) { repairs[R_BADTS]++; return; }
    if (du < 0) { repairs[R_NEGDUR]++; du = 0; }
    i64 c = as_int(s, a[A_CORR], -1, buf);
    i64 x = as_int(s, a[A_EXT].type != MISSING ? a[A_EXT] : a[A_EXT_LOWER], -1, buf);
    i64 b = as_int(s, a[A_BYTES], 0, buf);
    i64 cb = 0;
    i32 key, shp = -1;
    i32 pid = tok_id_cached(f[K_PID], 0), tid = tok_id_cached(f[K_TID], 1);
    if (k == KERNEL || k == MEMCPY || k == MEMSET || gpu_cat) {
      key = lane_keys.get({1, pid, tid, tok_id(a[A_DEVICE]), tok_id(a[A_STREAM])});
      if (k == KERNEL) {
        i64 ne = as_int(s, a[A_NELEMS], 0, buf);
        if (ne > 0) {
          i64 size = 4;
          if (a[A_DTYPE].type == STR) {
            std::string_view d = decode(s, a[A_DTYPE], buf);
            if (!ascii(d)) fallback("non-ASCII dtype");
            std::string low(d);
            for (auto& ch : low) if (ch >= 'A' && ch <= 'Z') ch = char(ch - 'A' + 'a');
            size = dtype_bytes(low);
          }
          if (__builtin_mul_overflow(ne, size, &cb)) fallback("collective size beyond 64 bits");
        }
      }
    } else {
      key = lane_keys.get({0, pid, tid, -1, -1});
      if (k == CPU_OP)
        shp = shapes.get({tok_id(a[A_DIMS]), tok_id(a[A_TYPES]), tok_id(a[A_STRIDES]), tok_id(a[A_CONCRETE]),
                          tok_id(a[A_FLOPS])});
    }
    i64 sq = as_int(s, a[A_SEQ], -1, buf);
    std::string_view nm = decode(s, f[K_NAME], buf);
    name.push_back(names.get(nm, f[K_NAME].esc));
    kind.push_back(k);
    lane_key.push_back(key);
    shape.push_back(shp);
    start.push_back(ts);
    dur.push_back(du);
    corr.push_back(c);
    ext.push_back(x);
    nbytes.push_back(b);
    seq.push_back(sq);
    coll.push_back(cb);
  }

  void flow(Tok* f, char ph) {
    const Tok& t = f[K_ID];
    i64 id;
    switch (t.type) {
      case INT:
        if (t.big) fallback("flow id beyond 64 bits");
        id = t.iv;
        break;
      case FLOAT: {
        double d = float_of(s, t);
        if (!(std::fabs(d) <= double(MAX_COUNT))) fallback("flow id beyond 2**53");
        id = i64(d);
        break;
      }
      case TRUE_: case FALSE_: fallback("boolean flow id");
      case STR: {
        bool ok;
        id = int_of_string(decode(s, t, buf), ok);
        if (!ok) { repairs[R_BADFLOW]++; return; }
        break;
      }
      default: repairs[R_BADFLOW]++; return;
    }
    auto it = flow_ids.find(id);
    i32 slot;
    if (it == flow_ids.end()) {
      slot = i32(flows.size());
      flow_ids.emplace(id, slot);
      flows.push_back({0, -1, 0, -1});
    } else {
      slot = it->second;
    }
    i64 ts;
    if (!us_to_ns(s, f[K_TS], ts)) { repairs[R_BADFLOW]++; return; }
    i32 key = lane_keys.get({0, tok_id_cached(f[K_PID], 0), tok_id_cached(f[K_TID], 1), -1, -1});
    auto& fl = flows[size_t(slot)];
    if (ph == 's' && fl[1] < 0) { fl[0] = ts; fl[1] = key; }
    if (ph == 'f' && fl[3] < 0) { fl[2] = ts; fl[3] = key; }
  }

  void reserve(size_t bytes) {  // ~190 bytes of JSON per event in Kineto traces; a guess, not a limit
    size_t guess = bytes / 160 + 16;
    kind.reserve(guess); name.reserve(guess); lane_key.reserve(guess); shape.reserve(guess);
    for (auto* v : {&start, &dur, &corr, &ext, &nbytes, &seq, &coll}) v->reserve(guess);
  }

  void events(Parser& p) {  // at '[' of traceEvents
    reserve(n - p.i);
    ++p.i;
    p.ws();
    if (p.peek() == ']') { ++p.i; return; }
    for (;;) {
      p.ws();
      if (p.peek() == '{') event(p);
      else { p.value(1); repairs[R_NONOBJ]++; }
      p.ws();
      char c = p.peek();
      ++p.i;
      if (c == ',') continue;
      if (c == ']') return;
      fallback("invalid JSON separator");
    }
  }
};

template <class T>
py::array_t<T> arr(const std::vector<T>& v) {
  py::array_t<T> out(v.size());
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
  return out;
}

py::bytes to_bytes(std::string_view v) { return py::bytes(v.data(), v.size()); }

py::dict scan(py::buffer data) {
  py::buffer_info info = data.request();
  if (info.ndim != 1 || info.itemsize != 1) throw std::invalid_argument("scan() takes bytes");
  Scan sc;
  sc.s = static_cast<const char*>(info.ptr);
  sc.n = size_t(info.size);
  py::list top;  // (key, begin, end) of top-level members other than traceEvents
  bool have_events = false;
  try {
    py::gil_scoped_release nogil;  // touches no Python object until the end
    Parser p{sc.s, sc.n};
    p.ws();
    if (p.i >= p.n) fallback("empty");
    if (sc.s[p.i] == '[') {
      sc.events(p);
      have_events = true;
    } else if (sc.s[p.i] == '{') {
      ++p.i;
      p.ws();
      if (p.peek() == '}') fallback("no traceEvents");
      std::vector<std::array<size_t, 4>> spans;  // key b, e, value b, e
      for (;;) {
        p.ws();
        if (p.peek() != '"') fallback("invalid JSON object key");
        Tok kt = p.str();
        p.ws();
        p.expect(':');
        p.ws();
        if (decode(sc.s, kt, sc.buf) == "traceEvents") {
          if (have_events) fallback("traceEvents given twice");
          if (p.peek() != '[') fallback("traceEvents is not a list");
          sc.events(p);
          have_events = true;
        } else {
          Tok v = p.value(1);
          spans.push_back({kt.b, kt.e, v.b, v.e});
        }
        p.ws();
        char c = p.peek();
        ++p.i;
        if (c == ',') continue;
        if (c == '}') break;
        fallback("invalid JSON separator");
      }
      py::gil_scoped_acquire gil;
      for (auto& sp : spans)
        top.append(py::make_tuple(to_bytes(std::string_view(sc.s + sp[0], sp[1] - sp[0])), sp[2], sp[3]));
    } else {
      fallback("not an object or array");
    }
    p.ws();
    if (p.i != p.n) fallback("trailing data after JSON");
    if (!have_events) fallback("no traceEvents");
  } catch (const Fallback& f) {
    py::dict out;
    out["fallback"] = py::str(f.why);
    return out;
  }
  py::dict out;
  out["top"] = top;
  out["kind"] = arr(sc.kind);
  out["name"] = arr(sc.name);
  out["lane_key"] = arr(sc.lane_key);
  out["shape"] = arr(sc.shape);
  out["start_ns"] = arr(sc.start);
  out["dur_ns"] = arr(sc.dur);
  out["corr"] = arr(sc.corr);
  out["ext"] = arr(sc.ext);
  out["bytes"] = arr(sc.nbytes);
  out["seq"] = arr(sc.seq);
  out["coll_bytes"] = arr(sc.coll);
  py::list names;
  for (auto v : sc.names.items) {
    PyObject* o = PyUnicode_DecodeUTF8(v.data(), Py_ssize_t(v.size()), "strict");
    if (!o) throw py::error_already_set();
    names.append(py::reinterpret_steal<py::object>(o));
  }
  out["names"] = names;
  py::list tokens;
  for (auto v : sc.tokens.items) tokens.append(to_bytes(v));
  out["tokens"] = tokens;
  py::list lane_keys, shapes;
  for (auto& k : sc.lane_keys.items) lane_keys.append(py::make_tuple(k[0], k[1], k[2], k[3], k[4]));
  for (auto& k : sc.shapes.items) shapes.append(py::make_tuple(k[0], k[1], k[2], k[3], k[4]));
  out["lane_keys"] = lane_keys;
  out["shapes"] = shapes;
  out["meta_events"] = arr(sc.meta_ranges);
  std::vector<i64> fl;
  for (auto& x : sc.flows) fl.insert(fl.end(), x.begin(), x.end());
  out["flows"] = arr(fl);
  py::list rep;
  for (auto r : sc.repairs) rep.append(r);
  out["repairs"] = rep;
  return out;
}

}  // namespace

namespace daydream_kineto {  // daydream/loader/_kineto_passes.cpp
py::tuple walk_lanes(py::array_t<int32_t, py::array::c_style | py::array::forcecast> lane,
                     py::array_t<int64_t, py::array::c_style | py::array::forcecast> start,
                     py::array_t<int64_t, py::array::c_style | py::array::forcecast> dur,
                     py::array_t<int8_t, py::array::c_style | py::array::forcecast> kind,
                     py::array_t<int32_t, py::array::c_style | py::array::forcecast> name,
                     py::array_t<bool, py::array::c_style | py::array::forcecast> lane_cpu, py::list names,
                     py::array_t<int8_t, py::array::c_style | py::array::forcecast> hint,
                     py::array_t<int8_t, py::array::c_style | py::array::forcecast> modkind, py::list modtext,
                     int annotation, int backward, int optimizer, int dataloader);
py::tuple cpu_slices(py::array_t<int64_t, py::array::c_style | py::array::forcecast> idx,
                     py::array_t<int64_t, py::array::c_style | py::array::forcecast> start,
                     py::array_t<int64_t, py::array::c_style | py::array::forcecast> end);
}  // namespace daydream_kineto

PYBIND11_MODULE(_kineto, m) {
  m.doc() = "Compiled Kineto JSON scanner of daydream.loader.fast (reference: daydream/loader/kineto.py).";
  m.def("scan", &scan, py::arg("data"),
        "Scan JSON bytes of one trace into event columns; {'fallback': reason} where the reference "
        "loader must run instead.");
  m.def("cpu_slices", &daydream_kineto::cpu_slices, "CPU self-time slices of one thread (graph/build.py: _cpu_slices).");
  m.def("walk_lanes", &daydream_kineto::walk_lanes, "Layer/phase stack walk over every CPU lane (layers._walk_lane).");
}
