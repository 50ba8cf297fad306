// The record files' layout and their whole-file reads and writes (see
// include/cache/kiln/record_file.h).
#include "kiln/record_file.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "file_bytes.h"

namespace kiln::cache {
namespace {

using detail::append;
using detail::read_at;

constexpr size_t kHeader = sizeof(RecordKind::magic) + 4 + 4 + 8;
constexpr size_t kRecord = 16;

}  // namespace

std::string record_file_path(const std::string& dir, const RecordKind& kind, std::string_view identity) {
  char hash[24];
  std::snprintf(hash, sizeof(hash), "-%016llx.bin",
                static_cast<unsigned long long>(XXH3_64bits(identity.data(), identity.size())));
  return dir + "/" + kind.file_prefix + hash;
}

std::string encode_records(const RecordKind& kind, std::string_view identity, const std::vector<Record>& records) {
  std::string out;
  out.reserve(kHeader + identity.size() + records.size() * kRecord + 8);
  out.append(kind.magic, sizeof(kind.magic));
  append<uint32_t>(out, kind.format_version);
  append<uint32_t>(out, static_cast<uint32_t>(identity.size()));
  append<uint64_t>(out, records.size());
  out.append(identity);
  for (const Record& r : records) {
    append<uint64_t>(out, r.key);
    append<uint64_t>(out, r.value);
  }
  append<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::string decode_records(const RecordKind& kind, std::string_view bytes, std::string_view identity,
                           std::vector<Record>& out) {
  out.clear();
  if (bytes.size() < kHeader + 8) return "a file of " + std::to_string(bytes.size()) + " bytes, shorter than a header";
  if (std::memcmp(bytes.data(), kind.magic, sizeof(kind.magic)) != 0) {
    return std::string("not a kiln ") + kind.file_prefix + " file (bad magic)";
  }
  const auto version = read_at<uint32_t>(bytes, 8);
  if (version != kind.format_version) {
    return "format version " + std::to_string(version) + ", not " + std::to_string(kind.format_version);
  }
  const auto id_len = read_at<uint32_t>(bytes, 12);
  const auto count = read_at<uint64_t>(bytes, 16);
  if (count > (bytes.size() - kHeader) / kRecord || kHeader + id_len + count * kRecord + 8 != bytes.size()) {
    return "lengths that do not add up to the file's " + std::to_string(bytes.size()) + " bytes";
  }
  const size_t body = bytes.size() - 8;
  if (XXH3_64bits(bytes.data(), body) != read_at<uint64_t>(bytes, body)) return "a checksum mismatch";
  if (bytes.substr(kHeader, id_len) != identity) return "written for another identity (build, torch, CPU or program)";
  out.reserve(count);
  for (size_t at = kHeader + id_len; at < body; at += kRecord) {
    out.push_back({read_at<uint64_t>(bytes, at), read_at<uint64_t>(bytes, at + 8)});
  }
  return "";
}

std::vector<Record> read_records(const std::string& path, const RecordKind& kind, std::string_view identity,
                                 std::string& problem) {
  problem.clear();
  std::vector<Record> out;
  std::string bytes, why;
  bool missing = false;
  if (!detail::read_file_whole(path, bytes, why, &missing)) {
    if (!missing) problem = "it cannot be read (" + why + ")";
    return out;
  }
  problem = decode_records(kind, bytes, identity, out);
  return out;
}

std::string write_records(const std::string& path, const RecordKind& kind, std::string_view identity,
                          const std::vector<Record>& records) {
  return detail::write_file_whole(path, encode_records(kind, identity, records));
}

}  // namespace kiln::cache
