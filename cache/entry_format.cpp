// Stored executables' byte layout (see entry_format.h).
#include "kiln/entry_format.h"

#include <xxhash.h>

#include "file_bytes.h"

namespace kiln::cache {
namespace {

using detail::append;
using detail::read_at;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'X', 'E', '\0'};
constexpr size_t kKeyAt = sizeof(kMagic) + 4 + 4;
// Format 1 had no kernel identity after the key: its fields after the key
// start 16 bytes earlier.
constexpr size_t kFixedHeaderV1 = kKeyAt + 16 + 8 + 8 + 8;
constexpr size_t kFixedHeader = kFixedHeaderV1 + 16;

}  // namespace

std::string encode_entry(const StoredEntry& e) {
  std::string out;
  out.reserve(kFixedHeader + e.fingerprint.size() + e.object.size() + 8);
  out.append(kMagic, sizeof(kMagic));
  append<uint32_t>(out, kEntryFormatVersion);
  append<uint32_t>(out, static_cast<uint32_t>(e.fingerprint.size()));
  append<uint64_t>(out, e.key.low);
  append<uint64_t>(out, e.key.high);
  append<uint64_t>(out, e.kernel.low);
  append<uint64_t>(out, e.kernel.high);
  append<double>(out, e.compile_ms);
  append<int64_t>(out, e.written_unix_s);
  append<uint64_t>(out, e.object.size());
  out += e.fingerprint;
  out += e.object;
  append<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::string decode_entry(std::string_view v, StoredEntry& out) {
  if (v.size() < kFixedHeaderV1 + 8) return "shorter than an entry's header (" + std::to_string(v.size()) + " bytes)";
  if (std::memcmp(v.data(), kMagic, sizeof(kMagic)) != 0) return "not a kiln entry (bad magic)";
  const auto version = read_at<uint32_t>(v, 8);
  if (version != kEntryFormatVersion && version != 1) {
    return "entry format " + std::to_string(version) + ", this kiln reads 1 to " + std::to_string(kEntryFormatVersion);
  }
  const size_t header = version == 1 ? kFixedHeaderV1 : kFixedHeader;
  if (v.size() < header + 8) return "shorter than an entry's header (" + std::to_string(v.size()) + " bytes)";
  size_t at = kKeyAt + 16;  // the field after the key
  Key kernel;
  if (version != 1) {
    kernel = {read_at<uint64_t>(v, at), read_at<uint64_t>(v, at + 8)};
    at += 16;
  }
  const auto fingerprint_len = read_at<uint32_t>(v, 12);
  const auto object_len = read_at<uint64_t>(v, at + 16);
  if (object_len > v.size() || header + fingerprint_len + object_len + 8 != v.size()) {
    return "lengths do not add up to the value's " + std::to_string(v.size()) + " bytes (truncated?)";
  }
  const size_t body = v.size() - 8;
  if (XXH3_64bits(v.data(), body) != read_at<uint64_t>(v, body)) return "checksum mismatch";
  out.key = {read_at<uint64_t>(v, kKeyAt), read_at<uint64_t>(v, kKeyAt + 8)};
  out.kernel = kernel;
  out.compile_ms = read_at<double>(v, at);
  out.written_unix_s = read_at<int64_t>(v, at + 8);
  out.fingerprint.assign(v.substr(header, fingerprint_len));
  out.object.assign(v.substr(header + fingerprint_len, object_len));
  return "";
}

}  // namespace kiln::cache
