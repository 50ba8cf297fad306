// The verdict file's layout and its whole-file reads and writes (see
// include/cache/kiln/verdict_file.h).
#include "kiln/verdict_file.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "file_bytes.h"

namespace kiln::cache {
namespace {

using detail::append;
using detail::read_at;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'V', 'R', 'D', '\0'};
constexpr size_t kHeader = sizeof(kMagic) + 4 + 4 + 8;
constexpr size_t kRecord = 16;

}  // namespace

std::string verdict_file_path(const std::string& dir, std::string_view identity) {
  char name[40];
  std::snprintf(name, sizeof(name), "verdicts-%016llx.bin",
                static_cast<unsigned long long>(XXH3_64bits(identity.data(), identity.size())));
  return dir + "/" + name;
}

std::string encode_verdicts(std::string_view identity, const std::vector<VerdictRecord>& records) {
  std::string out;
  out.reserve(kHeader + identity.size() + records.size() * kRecord + 8);
  out.append(kMagic, sizeof(kMagic));
  append<uint32_t>(out, kVerdictFormatVersion);
  append<uint32_t>(out, static_cast<uint32_t>(identity.size()));
  append<uint64_t>(out, records.size());
  out.append(identity);
  for (const VerdictRecord& r : records) {
    append<uint64_t>(out, r.op);
    append<uint64_t>(out, r.signature);
  }
  append<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::string decode_verdicts(std::string_view bytes, std::string_view identity, std::vector<VerdictRecord>& out) {
  out.clear();
  if (bytes.size() < kHeader + 8) return "a file of " + std::to_string(bytes.size()) + " bytes, shorter than a header";
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return "not a kiln verdict file (bad magic)";
  const auto version = read_at<uint32_t>(bytes, 8);
  if (version != kVerdictFormatVersion) {
    return "format version " + std::to_string(version) + ", not " + std::to_string(kVerdictFormatVersion);
  }
  const auto id_len = read_at<uint32_t>(bytes, 12);
  const auto count = read_at<uint64_t>(bytes, 16);
  if (count > (bytes.size() - kHeader) / kRecord || kHeader + id_len + count * kRecord + 8 != bytes.size()) {
    return "lengths that do not add up to the file's " + std::to_string(bytes.size()) + " bytes";
  }
  const size_t body = bytes.size() - 8;
  if (XXH3_64bits(bytes.data(), body) != read_at<uint64_t>(bytes, body)) return "a checksum mismatch";
  if (bytes.substr(kHeader, id_len) != identity) return "written for another build, torch or CPU";
  out.reserve(count);
  for (size_t at = kHeader + id_len; at < body; at += kRecord) {
    out.push_back({read_at<uint64_t>(bytes, at), read_at<uint64_t>(bytes, at + 8)});
  }
  return "";
}

std::vector<VerdictRecord> read_verdicts(const std::string& path, std::string_view identity, std::string& problem) {
  problem.clear();
  std::vector<VerdictRecord> out;
  std::string bytes, why;
  bool missing = false;
  if (!detail::read_file_whole(path, bytes, why, &missing)) {
    if (!missing) problem = "it cannot be read (" + why + ")";
    return out;
  }
  problem = decode_verdicts(bytes, identity, out);
  return out;
}

std::string write_verdicts(const std::string& path, std::string_view identity,
                           const std::vector<VerdictRecord>& records) {
  return detail::write_file_whole(path, encode_verdicts(identity, records));
}

}  // namespace kiln::cache
