// Export files (see include/cache/kiln/export_file.h).
#include "kiln/export_file.h"

#include <xxhash.h>

#include <cstring>

#include "file_bytes.h"
#include "kiln/entry_format.h"

namespace kiln::cache {
namespace {

using detail::append;
using detail::read_at;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'X', 'P', '\0'};
constexpr size_t kHeader = sizeof(kMagic) + 4 + 4 + 8;

}  // namespace

std::string encode_export(const std::vector<std::string>& entries) {
  std::string out;
  size_t total = kHeader + 8;
  for (const std::string& e : entries) total += 8 + e.size();
  out.reserve(total);
  out.append(kMagic, sizeof(kMagic));
  append<uint32_t>(out, kExportFormatVersion);
  append<uint32_t>(out, 0);
  append<uint64_t>(out, entries.size());
  for (const std::string& e : entries) {
    append<uint64_t>(out, e.size());
    out += e;
  }
  append<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::string decode_export(std::string_view f, std::vector<std::string>& entries) {
  entries.clear();
  if (f.size() < kHeader + 8) {
    return "shorter than an export file's header (" + std::to_string(f.size()) + " bytes; truncated?)";
  }
  if (std::memcmp(f.data(), kMagic, sizeof(kMagic)) != 0) return "not a kiln export file (bad magic)";
  const auto version = read_at<uint32_t>(f, 8);
  if (version != kExportFormatVersion) {
    return "export format " + std::to_string(version) + ", this kiln reads " + std::to_string(kExportFormatVersion);
  }
  // The checksum first: lengths are trusted only in a file that is whole.
  const size_t body = f.size() - 8;
  if (XXH3_64bits(f.data(), body) != read_at<uint64_t>(f, body)) return "checksum mismatch (damaged or truncated)";
  const auto count = read_at<uint64_t>(f, 16);
  size_t at = kHeader;
  std::vector<std::string> out;
  for (uint64_t i = 0; i < count; ++i) {
    if (body - at < 8) return "entry " + std::to_string(i) + " of " + std::to_string(count) + " is missing";
    const auto len = read_at<uint64_t>(f, at);
    at += 8;
    if (len > body - at) return "entry " + std::to_string(i) + " runs past the end of the file";
    out.emplace_back(f.substr(at, len));
    at += len;
  }
  if (at != body) return std::to_string(body - at) + " bytes after the last entry";
  entries = std::move(out);
  return "";
}

std::string write_export_file(const std::string& path, const std::vector<std::string>& entries) {
  const std::string failed = detail::write_file_whole(path, encode_export(entries));
  return failed.empty() ? "" : "cannot write '" + path + "': " + failed;
}

std::string read_export_file(const std::string& path, std::vector<std::string>& entries) {
  entries.clear();
  std::string bytes, why;
  if (!detail::read_file_whole(path, bytes, why)) return "cannot read '" + path + "': " + why;
  const std::string problem = decode_export(bytes, entries);
  return problem.empty() ? "" : "'" + path + "' is refused: " + problem;
}

ImportSelection select_for_import(const std::vector<std::string>& entries, std::string_view fingerprint) {
  ImportSelection s;
  for (const std::string& value : entries) {
    StoredEntry e;
    if (!decode_entry(value, e).empty()) {
      ++s.bad;
    } else if (e.fingerprint != fingerprint) {
      ++s.foreign;
    } else {
      s.matching.push_back(value);
    }
  }
  return s;
}

}  // namespace kiln::cache
