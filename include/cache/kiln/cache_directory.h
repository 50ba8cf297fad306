// The cache directory's safety rules. kiln loads native code from it, so a
// directory another user can write, or one another user owns, would let them
// run code in this process: such a directory is refused, never used.
#pragma once

#include <string>

namespace kiln::cache {

// Creates `dir` with mode 0700 when it is missing (its parents with the
// usual mode), then checks it: a directory (symbolic links followed), owned
// by this process's effective user, writable by no one else. Returns "" when
// it may be used, else what is wrong with it and how to fix it.
// `create` false: a missing directory is reported, not created.
std::string prepare_private_directory(const std::string& dir, bool create);

// Whether this process may create files in `dir`.
bool directory_is_writable(const std::string& dir);

}  // namespace kiln::cache
