// The cache directory's safety rules (see cache_directory.h).
#include "kiln/cache_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kiln::cache {

std::string prepare_private_directory(const std::string& dir, bool create) {
  namespace fs = std::filesystem;
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) return "'" + dir + "' cannot be read (" + std::strerror(errno) + ")";
    if (!create) return "'" + dir + "' does not exist";
    std::error_code ec;
    const fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return "'" + dir + "' cannot be created (" + std::strerror(errno) + ")";
    }
    if (::stat(dir.c_str(), &st) != 0) return "'" + dir + "' cannot be read (" + std::strerror(errno) + ")";
  }
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  if (st.st_uid != ::geteuid()) {
    return "'" + dir + "' is owned by user " + std::to_string(st.st_uid) + ", not by this user (" +
           std::to_string(::geteuid()) + "); kiln loads native code only from a directory of its own user";
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return "'" + dir + "' is writable by other users (mode " + mode +
           "); kiln loads native code only from a directory no one else can write (chmod 700 it)";
  }
  return "";
}

bool directory_is_writable(const std::string& dir) { return ::access(dir.c_str(), W_OK | X_OK) == 0; }

}  // namespace kiln::cache
