// The knob table: the one place kiln's environment variables are declared.
//
// Parsing, validation, `python -m kiln knobs` and docs/knobs.md are all derived
// from knob_table() in src/support/knobs.cpp. To add a knob: add a row there
// (its `set` stores the value) and a field to Settings; tests/cpp/test_knobs.cpp
// (every_knob()) then asks for a non-default value to check the row with.
// What the engine does with the settings is engine::options_for().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/log.h"

namespace kiln {

enum class KnobKind {
  Integer,     // decimal integer within [min, max]
  Boolean,     // 0 or 1
  Choice,      // one of `choices`
  ChoiceList,  // comma-separated subset of `choices` (empty = none)
  Text,        // a lower-case identifier
  Path,        // a filesystem path, or empty
};

struct Settings;

struct KnobSpec {
  const char* name;
  KnobKind kind;
  const char* default_value;  // as it would be written in the environment
  const char* help;           // one line
  // Stores a value already validated against this row into its Settings field,
  // resolving `special` ("auto"). parse_settings applies the rows in table
  // order, so a setter may read the fields of rows above it.
  void (*set)(Settings& settings, const std::string& value);
  int64_t min = 0;                        // Integer only
  int64_t max = 0;                        // Integer only
  std::vector<std::string> choices = {};  // Choice / ChoiceList
  // An extra literal accepted for an Integer knob, standing for a computed default.
  const char* special = nullptr;
  // Text values that are refused (names torch already gives a device type).
  std::vector<std::string> reserved = {};
};

// Every knob, in documentation order.
const std::vector<KnobSpec>& knob_table();
const KnobSpec* find_knob(const std::string& name);

// Human-readable description of what a knob accepts ("an integer in 1..16").
std::string accepted_values(const KnobSpec& spec);

// A knob set to a value it does not accept. The message names the variable,
// the value and what is accepted.
class KnobError : public std::invalid_argument {
 public:
  KnobError(const KnobSpec& spec, const std::string& value);
};

enum class FallbackPolicy { Warn, Error, Silent };

// Typed view of the knobs, parsed once from the environment. No field has a
// default of its own: the table holds the defaults, parse_settings({}) gives
// them, and a default-constructed Settings means nothing.
struct Settings {
  std::string device_name;
  int device_count;
  int64_t device_memory_mb;
  bool launch_blocking;
  FallbackPolicy fallback;
  bool metrics_at_exit;
  std::set<std::string, std::less<>> log;  // enabled KILN_LOG channels
  // KILN_MODE, the mode kiln starts in; the live mode, which Python may
  // switch, is the recorder's (trace::lazy_mode()).
  bool lazy;
  int64_t trace_max_ops;
  int fusion_max_ops;
  bool fast_math;
  int opt_level;  // KILN_OPT_LEVEL, 0..3
  int num_threads;
  int64_t stream_min_mb;        // 0: never
  bool async_compile;           // KILN_ASYNC_COMPILE
  int64_t compile_threshold;    // KILN_COMPILE_THRESHOLD
  bool shape_specialize;        // KILN_SHAPE_SPECIALIZE
  int64_t compile_delay_ms;     // KILN_COMPILE_DELAY_MS (tests)
  int64_t queue_low_watermark;  // KILN_QUEUE_LOW_WATERMARK, 0: off
  std::string dump_dir;         // empty: off
  bool cache;                   // KILN_CACHE: keep compiled kernels in the persistent store
  std::string cache_dir;        // KILN_CACHE_DIR, resolved ("" when no default can be found)
  bool cache_read_only;         // KILN_CACHE_READONLY
  int64_t cache_max_mb;         // KILN_CACHE_MAX_MB

  bool log_enabled(std::string_view channel) const { return channel_in(log, channel); }
  bool operator==(const Settings&) const = default;  // tests compare whole settings
};

struct KnobValue {
  std::string value;
  std::string source;  // "environment" or "default"
};

// Reads and validates every knob. `env` maps variable names to values; pass
// nullopt to read the process environment. Throws KnobError on a bad value.
Settings parse_settings(const std::optional<std::map<std::string, std::string>>& env = std::nullopt);

// Current raw value and where it came from, for each knob (no validation).
std::vector<std::pair<const KnobSpec*, KnobValue>> describe_knobs(
    const std::optional<std::map<std::string, std::string>>& env = std::nullopt);

// Warnings for KILN_* variables that are not knobs, naming the closest knob.
std::vector<std::string> unknown_knob_warnings(
    const std::optional<std::map<std::string, std::string>>& env = std::nullopt);

// docs/knobs.md, generated from the table.
std::string knobs_markdown();

// The default thread count when KILN_NUM_THREADS=auto: the online cores.
int auto_num_threads();

// The default device capacity when KILN_DEVICE_MEMORY_MB=auto: a quarter of RAM.
int64_t auto_device_memory_mb();

}  // namespace kiln
