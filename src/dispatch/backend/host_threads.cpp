// The calling thread's OpenMP team (see host_threads.h).
#include "dispatch/backend/host_threads.h"

#include <dlfcn.h>
#include <link.h>

#include <string_view>

namespace kiln::dispatch {
namespace {

using PauseAll = int (*)(int);
constexpr int kOmpPauseSoft = 1;  // omp_pause_soft: threads go, settings stay

// omp_pause_resource_all (OpenMP 5.0) from the libgomp torch loaded, found
// by its file name: torch's wheel bundles its own copy, which a name-only
// dlopen need not find.
PauseAll find_pause_all() {
  PauseAll found = nullptr;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string_view path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const size_t slash = path.rfind('/');
        const std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
        if (file.substr(0, 7) != "libgomp") return 0;
        void* lib = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        if (lib == nullptr) return 0;
        *static_cast<PauseAll*>(out) = reinterpret_cast<PauseAll>(dlsym(lib, "omp_pause_resource_all"));
        dlclose(lib);  // RTLD_NOLOAD took a reference; torch keeps its own
        return *static_cast<PauseAll*>(out) != nullptr ? 1 : 0;
      },
      &found);
  return found;
}

}  // namespace

void release_host_openmp_team() {
  static const PauseAll pause_all = find_pause_all();
  // Inside a parallel region libgomp refuses (returns -1) and keeps the team.
  if (pause_all != nullptr) pause_all(kOmpPauseSoft);
}

}  // namespace kiln::dispatch
