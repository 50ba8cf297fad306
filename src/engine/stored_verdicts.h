// The first-sight verdicts of the process's cache directory (internal to
// src/engine; the API is in include/engine/kiln/engine.h): loaded at the
// first query, merged with what other processes saved meanwhile and saved
// at exit.
#pragma once

#include <string>

namespace kiln::engine {

// Where the verdicts of `identity` live: the store's directory (empty:
// none, memory only). Read-only: used, never saved.
void open_verdicts(const std::string& dir, const std::string& identity, bool read_only);
// Saves what this process learned (close_store calls it).
void save_verdicts();

}  // namespace kiln::engine
