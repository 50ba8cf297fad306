// What cache/'s file formats share (internal to cache/): little-endian
// fields in and out of a byte string, and a file read or written whole. A
// file is written through a temporary file beside it (mode 0600), synced and
// renamed over it, so a reader sees the old file or the new one, never a
// part, whatever happens to the writer.
#pragma once

#include <bit>
#include <cstring>
#include <string>
#include <string_view>

namespace kiln::cache::detail {

template <typename T>
void append(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little, "kiln's cache files are little-endian");
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T read_at(std::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

// Returns "" or what failed ("creating a temporary file in 'dir' failed:
// ...", "writing ... failed: ...").
std::string write_file_whole(const std::string& path, std::string_view bytes);

// The file's bytes in `out`; false when it cannot be read, with errno's
// meaning in `why` (and `missing` set for a file that does not exist).
bool read_file_whole(const std::string& path, std::string& out, std::string& why, bool* missing = nullptr);

}  // namespace kiln::cache::detail
