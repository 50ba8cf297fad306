// Export files (see include/cache/kiln/export_file.h).
#include "kiln/export_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kiln/entry_format.h"

namespace kiln::cache {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'X', 'P', '\0'};
constexpr size_t kHeader = sizeof(kMagic) + 4 + 4 + 8;

template <typename T>
void append(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little, "kiln's export files are little-endian");
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T read_at(std::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

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
  const std::string bytes = encode_export(entries);
  // The temporary file sits beside `path`, so that the rename is atomic.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string tmp = dir + "/.kiln-export-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return "cannot create a temporary file in '" + dir + "': " + std::strerror(errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = done == bytes.size() ? (::fsync(fd) == 0 ? 0 : errno) : errno;
  ::close(fd);
  if (done != bytes.size() || err != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(err ? err : errno);
    ::unlink(tmp.c_str());
    return "cannot write '" + path + "': " + why;
  }
  return "";
}

std::string read_export_file(const std::string& path, std::vector<std::string>& entries) {
  entries.clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read '" + path + "': " + std::strerror(errno);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return "cannot read '" + path + "'";
  const std::string problem = decode_export(bytes.str(), entries);
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
