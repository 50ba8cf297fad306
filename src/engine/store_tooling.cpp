// What `python -m kiln cache prune|export|import|stats` asks of the store
// (see engine.h): the process's store and fingerprint, over cache/'s pieces.
#include <chrono>

#include "engine/executable_store.h"
#include "kiln/engine.h"
#include "kiln/export_file.h"
#include "kiln/run_log.h"

namespace kiln::engine {

bool store_read_only() {
  const std::shared_ptr<cache::Store> s = store();
  return s && s->read_only();
}

cache::Store::PruneResult prune_store(int timeout_ms) {
  const std::shared_ptr<cache::Store> s = store();
  if (!s) return {};
  const cache::Store::PruneResult r = s->prune(fingerprint());
  s->flush(std::chrono::milliseconds(timeout_ms));
  return r;
}

ExportOutcome export_store(const std::string& path) {
  ExportOutcome out;
  const std::shared_ptr<cache::Store> s = store();
  if (!s) {
    out.error = "the persistent cache is off in this process";
    return out;
  }
  const std::vector<std::string> entries = s->encoded_entries(fingerprint());
  out.error = cache::write_export_file(path, entries);
  if (out.error.empty()) out.entries = entries.size();
  return out;
}

ImportOutcome import_store(const std::string& path, int timeout_ms) {
  ImportOutcome out;
  const std::shared_ptr<cache::Store> s = store();
  if (!s) {
    out.error = "the persistent cache is off in this process";
    return out;
  }
  std::vector<std::string> entries;
  out.error = cache::read_export_file(path, entries);  // the whole file is checked before anything is stored
  if (!out.error.empty()) return out;
  cache::ImportSelection chosen = cache::select_for_import(entries, fingerprint());
  out.foreign = chosen.foreign;
  out.bad = chosen.bad;
  for (std::string& value : chosen.matching) {
    const std::string problem = s->put_encoded(std::move(value));
    if (!problem.empty()) {
      out.error = problem;
      return out;
    }
    ++out.imported;
  }
  if (!s->flush(std::chrono::milliseconds(timeout_ms))) {
    out.error = "the store did not take the entries within " + std::to_string(timeout_ms) + " ms";
  } else if (std::string failed = s->take_warning(); !failed.empty()) {
    out.error = failed;
  }
  return out;
}

std::vector<cache::RunRecord> recent_runs() {
  const std::shared_ptr<cache::Store> s = store();
  return s ? cache::read_runs(s->dir()) : std::vector<cache::RunRecord>{};
}

}  // namespace kiln::engine
