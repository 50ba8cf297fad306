// A process for Store.SurvivesFiftyKillsAtRandomMoments: it writes, reads
// and evicts in the store at argv[1] as fast as it can until it is killed
// (SIGKILL, at a random moment chosen by the test). Seeded by argv[2], so
// each run writes other keys and sizes. No torch, no LLVM.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kiln/store.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DIR SEED MAX_BYTES\n", argv[0]);
    return 2;
  }
  std::string why;
  auto store = kiln::cache::Store::open({argv[1], false, std::strtoull(argv[3], nullptr, 10)}, why);
  if (!store) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  std::mt19937_64 rng(std::strtoull(argv[2], nullptr, 10));
  std::string object;
  std::vector<std::string> written;  // names of the last entries put, for lookups
  for (uint64_t n = 0;; ++n) {
    // 1-8 new entries of 1-64 KB (a batch may hold several), a lookup of an
    // older one (a touch for the LRU order), and now and then a wait for
    // the writer, so that kills land in every phase of a batch.
    const int puts = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < puts; ++i) {
      object.resize(1024 + rng() % (63 * 1024));
      for (char& c : object) c = static_cast<char>(rng());
      const std::string name = std::to_string(rng());
      store->put(kiln::cache::make_key(name, "fp"), "fp", object, 1.0);
      if (written.size() < 64) written.push_back(name);
      else written[rng() % written.size()] = name;
    }
    store->get(kiln::cache::make_key(written[rng() % written.size()], "fp"), "fp");
    if (n % 3 == 0) store->flush(std::chrono::seconds(10));
  }
}
