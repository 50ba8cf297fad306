// Knob table, parsing and validation. See include/support/kiln/knobs.h.
#include "kiln/knobs.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <type_traits>

extern char** environ;

namespace kiln {

namespace {

std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return std::nullopt;
  }
  try {
    return std::stoll(s);
  } catch (const std::out_of_range&) {  // 19 digits can exceed int64_t
    return std::nullopt;
  }
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Setters for the rows. Each gets a value its row has validated.
template <auto field>
void set_text(Settings& s, const std::string& v) {
  s.*field = v;
}

template <auto field>
void set_flag(Settings& s, const std::string& v) {
  s.*field = v == "1";
}

template <auto field>
void set_integer(Settings& s, const std::string& v) {
  s.*field = static_cast<std::remove_reference_t<decltype(s.*field)>>(*parse_int(v));
}

void set_device_memory_mb(Settings& s, const std::string& v) {
  s.device_memory_mb = v == "auto" ? auto_device_memory_mb() : *parse_int(v);
}

void set_fallback(Settings& s, const std::string& v) {
  s.fallback = v == "error" ? FallbackPolicy::Error : v == "silent" ? FallbackPolicy::Silent : FallbackPolicy::Warn;
}

void set_start_mode(Settings& s, const std::string& v) { s.lazy = v == "lazy"; }

void set_log(Settings& s, const std::string& v) {
  const std::vector<std::string> channels = split_list(v);
  s.log = std::set<std::string, std::less<>>(channels.begin(), channels.end());
}

void set_num_threads(Settings& s, const std::string& v) {
  s.num_threads = v == "auto" ? auto_num_threads() : static_cast<int>(*parse_int(v));
}

// auto: 4 MiB per thread, so it reads num_threads: its row comes after
// KILN_NUM_THREADS (test Knobs.StreamingThresholdFollowsTheThreads).
void set_stream_min_mb(Settings& s, const std::string& v) {
  s.stream_min_mb = v == "auto" ? 4 * int64_t{s.num_threads} : *parse_int(v);
}

// Empty: $XDG_CACHE_HOME/kiln (an absolute XDG_CACHE_HOME only, as the XDG
// spec says), else $HOME/.cache/kiln; "" when neither is set.
void set_cache_dir(Settings& s, const std::string& v) {
  if (!v.empty()) {
    s.cache_dir = v;
    return;
  }
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && xdg[0] == '/') {
    s.cache_dir = std::string(xdg) + "/kiln";
  } else if (home && home[0] != '\0') {
    s.cache_dir = std::string(home) + "/.cache/kiln";
  } else {
    s.cache_dir.clear();
  }
}

// KILN_DIFF_CASES is the test suite's; kiln keeps nothing of it.
void read_by_the_tests_only(Settings&, const std::string&) {}

}  // namespace

// parse_settings sets the fields in this order: a row's setter may read the
// rows above it (KILN_STREAM_MIN_MB reads KILN_NUM_THREADS).
const std::vector<KnobSpec>& knob_table() {
  // clang-format off: a table, one row per knob
  static const std::vector<KnobSpec> table = {
      {"KILN_DEVICE_NAME", KnobKind::Text, "neuron",
       "Name the device registers under (torch.device('<name>'), torch.<name>, Tensor.<name>()).",
       set_text<&Settings::device_name>, 0, 0, {}, nullptr,
       {"cpu", "cuda", "hip", "mps", "xpu", "mtia", "meta", "xla", "lazy", "ipu", "hpu", "ve", "fpga", "maia",
        "vulkan", "mkldnn", "opengl", "opencl", "ideep", "ort", "privateuseone"}},
      {"KILN_DEVICE_COUNT", KnobKind::Integer, "2", "Number of emulated devices.",
       set_integer<&Settings::device_count>, 1, 16},
      {"KILN_DEVICE_MEMORY_MB", KnobKind::Integer, "auto",
       "Capacity of each device's memory pool in MiB; auto = a quarter of the machine's RAM.",
       set_device_memory_mb, 1, int64_t(1) << 30, {}, "auto"},
      {"KILN_LAUNCH_BLOCKING", KnobKind::Boolean, "0",
       "1: wait for every launch, so a failing op raises at the op instead of at the next sync.",
       set_flag<&Settings::launch_blocking>},
      {"KILN_FALLBACK", KnobKind::Choice, "warn",
       "What a host fallback does: warn once per op, raise an error, or stay silent.", set_fallback,
       0, 0, {"warn", "error", "silent"}},
      {"KILN_METRICS", KnobKind::Boolean, "0", "1: print kiln's metrics report when the process exits.",
       set_flag<&Settings::metrics_at_exit>},
      {"KILN_LOG", KnobKind::ChoiceList, "",
       "Comma-separated log channels printed to stderr (fusion: each region as it is formed).", set_log, 0,
       0, {"runtime", "dispatch", "fallback", "fusion", "compile", "cache", "all"}},
      {"KILN_MODE", KnobKind::Choice, "lazy",
       "lazy: record ops into micro-traces, fuse and compile them, launch at sync points; "
       "eager: one library-kernel launch per op.",
       set_start_mode, 0, 0, {"lazy", "eager"}},
      {"KILN_TRACE_MAX_OPS", KnobKind::Integer, "1024",
       "A micro-trace is flushed when it holds this many ops.",
       set_integer<&Settings::trace_max_ops>, 1, 1000000},
      {"KILN_FUSION_MAX_OPS", KnobKind::Integer, "64", "Most ops fused into one region (one kernel).",
       set_integer<&Settings::fusion_max_ops>, 1, 4096},
      {"KILN_FAST_MATH", KnobKind::Boolean, "0",
       "1: let compiled kernels reassociate and contract floating-point math and divide by a refined "
       "reciprocal estimate (faster reductions and divisions, results differ from eager in the last bits).",
       set_flag<&Settings::fast_math>},
      {"KILN_OPT_LEVEL", KnobKind::Integer, "2",
       "How hard LLVM optimizes compiled kernels: 0 none (fastest compile, scalar loops), 1 cleanup only, "
       "2 kiln's kernel pipeline (loop vectorization and what it needs), 3 that plus GVN, SLP and unrolling. "
       "Part of every cache key.",
       set_integer<&Settings::opt_level>, 0, 3},
      {"KILN_NUM_THREADS", KnobKind::Integer, "auto",
       "Threads a compiled kernel splits its iteration space over; auto = the machine's cores.", set_num_threads,
       1, 256, {}, "auto"},
      {"KILN_STREAM_MIN_MB", KnobKind::Integer, "auto",
       "A pointwise kernel launch that stores at least this many MiB writes them with non-temporal stores, "
       "which bypass the cache; 0: never; auto = 4 per KILN_NUM_THREADS thread.",
       set_stream_min_mb, 0, 1 << 20, {}, "auto"},
      {"KILN_ASYNC_COMPILE", KnobKind::Boolean, "1",
       "1: a trace's first occurrences run as library kernels while a background thread of idle priority "
       "compiles its fused kernels, which run once the program has waited for the device since (or from "
       "the occurrence after next; a fused launch whose kernel is still compiling waits on the device, not "
       "in the program); 0: the flush compiles them before returning.",
       set_flag<&Settings::async_compile>},
      {"KILN_COMPILE_THRESHOLD", KnobKind::Integer, "2",
       "Occurrences of a trace before its fused kernels are compiled: until then a trace whose fused "
       "kernels are not cached (in memory or in the store) runs as library kernels, compiling nothing, "
       "unless its first op covers 2^20 elements or more and a second op joins it. A trace whose kernels "
       "would each hold one op needs one occurrence more, and is compiled only where its largest op covers "
       "more than 2^10 elements and at most 2^17. 2: a trace seen once is never compiled; "
       "1: compile at first sight (with KILN_ASYNC_COMPILE=0: every trace fused at its first flush).",
       set_integer<&Settings::compile_threshold>, 1, 1000000},
      {"KILN_QUEUE_LOW_WATERMARK", KnobKind::Integer, "0",
       "0: a trace waits for a sync point, an untraced op or KILN_TRACE_MAX_OPS. N > 0: a fused trace of N "
       "ops or more is flushed as soon as the device's queue holds fewer than N launches, so that the device "
       "does not idle while the program records. The trace after a cut goes on fused, as the whole would "
       "have run, so where the cuts fall (timing) changes no result; more distinct kernels may compile.",
       set_integer<&Settings::queue_low_watermark>, 0, 1000000},
      {"KILN_SHAPE_SPECIALIZE", KnobKind::Boolean, "0",
       "1: bake each launch's sizes and strides into its compiled kernel, so that LLVM knows every trip "
       "count (one kernel per geometry: a new size compiles again); 0: one kernel serves every size.",
       set_flag<&Settings::shape_specialize>},
      {"KILN_COMPILE_DELAY_MS", KnobKind::Integer, "0",
       "Test suite only: milliseconds every kernel compile sleeps first, to show that results never "
       "depend on when a compile finishes.",
       set_integer<&Settings::compile_delay_ms>, 0, 60000},
      {"KILN_DUMP_DIR", KnobKind::Path, "",
       "Directory where the Kernel IR and LLVM IR of every compiled region are written (empty: off).",
       set_text<&Settings::dump_dir>},
      {"KILN_CACHE", KnobKind::Boolean, "1",
       "1: keep compiled kernels in a persistent store in KILN_CACHE_DIR, shared by the user's processes and "
       "runs; 0: compiled kernels live in the process's memory only.",
       set_flag<&Settings::cache>},
      {"KILN_CACHE_DIR", KnobKind::Path, "",
       "Directory of the persistent store, created with mode 0700; empty: $XDG_CACHE_HOME/kiln, else "
       "~/.cache/kiln. A directory other users can write, or another user owns, is refused.",
       set_cache_dir},
      {"KILN_CACHE_READONLY", KnobKind::Boolean, "0",
       "1: use the persistent store's kernels but never write to it (a shared, prebuilt cache).",
       set_flag<&Settings::cache_read_only>},
      {"KILN_CACHE_MAX_MB", KnobKind::Integer, "2048",
       "MiB of entries the persistent store keeps; past it the least recently used are evicted.",
       set_integer<&Settings::cache_max_mb>, 1, int64_t(1) << 30},
      {"KILN_DIFF_CASES", KnobKind::Integer, "2000",
       "Test suite only: how many seeded random programs the lazy-vs-eager differential test runs "
       "(tests/python/test_lazy_differential.py); kiln itself does not read it.",
       read_by_the_tests_only, 1, 100000000},
  };
  // clang-format on

  return table;
}

const KnobSpec* find_knob(const std::string& name) {
  for (const auto& k : knob_table()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

namespace {

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::map<std::string, std::string> process_env() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    if (key.rfind("KILN_", 0) == 0) env.emplace(key, kv.substr(eq + 1));
  }
  return env;
}

std::map<std::string, std::string> env_or_process(const std::optional<std::map<std::string, std::string>>& env) {
  return env ? *env : process_env();
}

// Validates `value` against `spec`; throws KnobError.
void validate(const KnobSpec& spec, const std::string& value) {
  switch (spec.kind) {
    case KnobKind::Integer: {
      if (spec.special != nullptr && value == spec.special) return;
      auto v = parse_int(value);
      if (!v || *v < spec.min || *v > spec.max) throw KnobError(spec, value);
      return;
    }
    case KnobKind::Boolean:
      if (value != "0" && value != "1") throw KnobError(spec, value);
      return;
    case KnobKind::Choice:
      if (std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end())
        throw KnobError(spec, value);
      return;
    case KnobKind::ChoiceList:
      for (const auto& item : split_list(value)) {
        if (std::find(spec.choices.begin(), spec.choices.end(), item) == spec.choices.end())
          throw KnobError(spec, value);
      }
      return;
    case KnobKind::Path: return;  // any path; whether it is writable is checked where it is used
    case KnobKind::Text: {
      bool ok = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      });
      if (!ok || !(value[0] >= 'a' && value[0] <= 'z')) throw KnobError(spec, value);
      if (std::find(spec.reserved.begin(), spec.reserved.end(), value) != spec.reserved.end())
        throw KnobError(spec, value);
      return;
    }
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string accepted_values(const KnobSpec& spec) {
  switch (spec.kind) {
    case KnobKind::Integer: {
      std::string s = "an integer in " + std::to_string(spec.min) + ".." + std::to_string(spec.max);
      if (spec.special != nullptr) s += " or '" + std::string(spec.special) + "'";
      return s;
    }
    case KnobKind::Boolean: return "0 or 1";
    case KnobKind::Choice: return "one of " + join(spec.choices, ", ");
    case KnobKind::ChoiceList: return "a comma-separated list of " + join(spec.choices, ", ") + " (or empty)";
    case KnobKind::Path: return "a directory path, or empty";
    case KnobKind::Text: {
      std::string s = "a lower-case identifier ([a-z][a-z0-9_]*)";
      if (!spec.reserved.empty()) s += " other than " + join(spec.reserved, ", ");
      return s;
    }
  }
  return "";
}

KnobError::KnobError(const KnobSpec& spec, const std::string& value)
    : std::invalid_argument(std::string("kiln: invalid value for ") + spec.name + ": '" + value +
                            "'; accepted: " + accepted_values(spec) + " (default " +
                            (*spec.default_value ? spec.default_value : "empty") + ")") {}

int auto_num_threads() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(std::min<long>(n, 256)) : 1;
}

int64_t auto_device_memory_mb() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 4096;
  return std::max<int64_t>(256, (int64_t(pages) * page_size >> 20) / 4);
}

std::vector<std::pair<const KnobSpec*, KnobValue>> describe_knobs(
    const std::optional<std::map<std::string, std::string>>& env) {
  auto vars = env_or_process(env);
  std::vector<std::pair<const KnobSpec*, KnobValue>> out;
  for (const auto& k : knob_table()) {
    auto it = vars.find(k.name);
    if (it != vars.end()) out.push_back({&k, {it->second, "environment"}});
    else out.push_back({&k, {k.default_value, "default"}});
  }
  return out;
}

Settings parse_settings(const std::optional<std::map<std::string, std::string>>& env) {
  Settings s{};  // zeros until the rows set every field
  for (auto& [spec, v] : describe_knobs(env)) {
    validate(*spec, v.value);
    spec->set(s, v.value);
  }
  return s;
}

std::vector<std::string> unknown_knob_warnings(const std::optional<std::map<std::string, std::string>>& env) {
  std::vector<std::string> warnings;
  for (const auto& [name, value] : env_or_process(env)) {
    if (name.rfind("KILN_", 0) != 0 || find_knob(name) != nullptr) continue;
    const KnobSpec* best = nullptr;
    size_t best_d = SIZE_MAX;
    for (const auto& k : knob_table()) {
      size_t d = edit_distance(name, k.name);
      if (d < best_d) best_d = d, best = &k;
    }
    std::string msg = "kiln: unknown environment variable " + name + " is ignored";
    if (best != nullptr) msg += "; did you mean " + std::string(best->name) + "?";
    warnings.push_back(msg);
  }
  return warnings;
}

std::string knobs_markdown() {
  std::ostringstream os;
  os << "# Knobs\n\n"
     << "Generated from the knob table (`src/support/knobs.cpp`) by `python -m kiln knobs --markdown`;\n"
     << "`make test` fails when this file is stale. Every knob is read once, when kiln loads;\n"
     << "a value outside what is accepted fails the import with a message naming the variable.\n\n"
     << "| variable | default | accepted | what it does |\n|---|---|---|---|\n";
  for (const auto& k : knob_table()) {
    os << "| `" << k.name << "` | " << (*k.default_value ? "`" + std::string(k.default_value) + "`" : "(empty)")
       << " | " << accepted_values(k) << " | " << k.help << " |\n";
  }
  return os.str();
}

}  // namespace kiln
