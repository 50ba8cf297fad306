// Stored executables' byte layout (see entry_format.h).
#include "kiln/entry_format.h"

#include <xxhash.h>

#include "file_bytes.h"

namespace kiln::cache {
namespace {

using detail::append;
using detail::read_at;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'X', 'E', '\0'};
constexpr size_t kFixedHeader = sizeof(kMagic) + 4 + 4 + 8 + 8 + 8 + 8 + 8;

}  // namespace

std::string encode_entry(const StoredEntry& e) {
  std::string out;
  out.reserve(kFixedHeader + e.fingerprint.size() + e.object.size() + 8);
  out.append(kMagic, sizeof(kMagic));
  append<uint32_t>(out, kEntryFormatVersion);
  append<uint32_t>(out, static_cast<uint32_t>(e.fingerprint.size()));
  append<uint64_t>(out, e.key.low);
  append<uint64_t>(out, e.key.high);
  append<double>(out, e.compile_ms);
  append<int64_t>(out, e.written_unix_s);
  append<uint64_t>(out, e.object.size());
  out += e.fingerprint;
  out += e.object;
  append<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::string decode_entry(std::string_view v, StoredEntry& out) {
  if (v.size() < kFixedHeader + 8) return "shorter than an entry's header (" + std::to_string(v.size()) + " bytes)";
  if (std::memcmp(v.data(), kMagic, sizeof(kMagic)) != 0) return "not a kiln entry (bad magic)";
  const auto version = read_at<uint32_t>(v, 8);
  if (version != kEntryFormatVersion) {
    return "entry format " + std::to_string(version) + ", this kiln reads " + std::to_string(kEntryFormatVersion);
  }
  const auto fingerprint_len = read_at<uint32_t>(v, 12);
  const auto object_len = read_at<uint64_t>(v, 48);
  if (object_len > v.size() || kFixedHeader + fingerprint_len + object_len + 8 != v.size()) {
    return "lengths do not add up to the value's " + std::to_string(v.size()) + " bytes (truncated?)";
  }
  const size_t body = v.size() - 8;
  if (XXH3_64bits(v.data(), body) != read_at<uint64_t>(v, body)) return "checksum mismatch";
  out.key = {read_at<uint64_t>(v, 16), read_at<uint64_t>(v, 24)};
  out.compile_ms = read_at<double>(v, 32);
  out.written_unix_s = read_at<int64_t>(v, 40);
  out.fingerprint.assign(v.substr(kFixedHeader, fingerprint_len));
  out.object.assign(v.substr(kFixedHeader + fingerprint_len, object_len));
  return "";
}

}  // namespace kiln::cache
