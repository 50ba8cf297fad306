// What the store's tests share: a private temporary directory and an opener.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "kiln/store.h"

namespace kiln::test_support {

// A fresh private directory, removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "kiln-store-test-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline std::unique_ptr<cache::Store> open_store(const std::string& dir, bool read_only = false,
                                                uint64_t max_bytes = 0) {
  std::string why;
  auto s = cache::Store::open({dir, read_only, max_bytes}, why);
  EXPECT_TRUE(s) << why;
  return s;
}

}  // namespace kiln::test_support
