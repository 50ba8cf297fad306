// Knob table: parsing, validation messages, warnings and generated docs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/knobs.h"

using kiln::FallbackPolicy;
using kiln::KnobError;
using kiln::Settings;

namespace {

using Env = std::map<std::string, std::string>;

// Every knob with a value other than its default, and what parsing that value
// does to the default settings: the knob's own field, and fields that follow it.
struct KnobCase {
  std::string name;
  std::string value;
  void (*expect)(Settings& s);
};

// Not the machine's auto thread count, so setting it changes the settings.
int other_thread_count() { return kiln::auto_num_threads() % 256 + 1; }

const std::vector<KnobCase>& every_knob() {
  static const std::vector<KnobCase> cases = {
      {"KILN_DEVICE_NAME", "my_dev", [](Settings& s) { s.device_name = "my_dev"; }},
      {"KILN_DEVICE_COUNT", "3", [](Settings& s) { s.device_count = 3; }},
      {"KILN_DEVICE_MEMORY_MB", "1", [](Settings& s) { s.device_memory_mb = 1; }},  // auto is >= 256
      {"KILN_LAUNCH_BLOCKING", "1", [](Settings& s) { s.launch_blocking = true; }},
      {"KILN_FALLBACK", "error", [](Settings& s) { s.fallback = FallbackPolicy::Error; }},
      {"KILN_METRICS", "1", [](Settings& s) { s.metrics_at_exit = true; }},
      {"KILN_LOG", "fusion", [](Settings& s) { s.log = {"fusion"}; }},
      {"KILN_MODE", "eager", [](Settings& s) { s.lazy = false; }},
      {"KILN_TRACE_MAX_OPS", "7", [](Settings& s) { s.trace_max_ops = 7; }},
      {"KILN_FUSION_MAX_OPS", "3", [](Settings& s) { s.fusion_max_ops = 3; }},
      {"KILN_FAST_MATH", "1", [](Settings& s) { s.fast_math = true; }},
      {"KILN_OPT_LEVEL", "0", [](Settings& s) { s.opt_level = 0; }},
      {"KILN_COMPILE_THRESHOLD", "4", [](Settings& s) { s.compile_threshold = 4; }},
      {"KILN_SHAPE_SPECIALIZE", "1", [](Settings& s) { s.shape_specialize = true; }},
      {"KILN_ASYNC_COMPILE", "0", [](Settings& s) { s.async_compile = false; }},
      {"KILN_COMPILE_DELAY_MS", "25", [](Settings& s) { s.compile_delay_ms = 25; }},
      {"KILN_QUEUE_LOW_WATERMARK", "15", [](Settings& s) { s.queue_low_watermark = 15; }},
      {"KILN_NUM_THREADS", std::to_string(other_thread_count()),
       [](Settings& s) {
         s.num_threads = other_thread_count();
         s.stream_min_mb = 4 * int64_t{s.num_threads};  // its auto follows the threads
       }},
      {"KILN_STREAM_MIN_MB", "0", [](Settings& s) { s.stream_min_mb = 0; }},
      {"KILN_DUMP_DIR", "/tmp/kiln dump", [](Settings& s) { s.dump_dir = "/tmp/kiln dump"; }},
      {"KILN_CACHE", "0", [](Settings& s) { s.cache = false; }},
      {"KILN_CACHE_DIR", "/tmp/kiln cache", [](Settings& s) { s.cache_dir = "/tmp/kiln cache"; }},
      {"KILN_CACHE_READONLY", "1", [](Settings& s) { s.cache_read_only = true; }},
      {"KILN_CACHE_MAX_MB", "3", [](Settings& s) { s.cache_max_mb = 3; }},
      {"KILN_DIFF_CASES", "5", [](Settings&) {}},  // the test suite's: kiln keeps nothing
  };
  return cases;
}

const std::vector<std::string> kAllKnobs = [] {
  std::vector<std::string> names;
  for (const auto& c : every_knob()) names.push_back(c.name);
  return names;
}();

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Parses {name: value} and expects a KnobError naming the variable, the value
// and what the knob accepts.
void expect_knob_error(const std::string& name, const std::string& value) {
  SCOPED_TRACE(name + "=" + value);
  const kiln::KnobSpec* spec = kiln::find_knob(name);
  ASSERT_NE(spec, nullptr);
  try {
    kiln::parse_settings(Env{{name, value}});
    ADD_FAILURE() << "expected KnobError";
  } catch (const KnobError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, name)) << msg;
    EXPECT_TRUE(contains(msg, "'" + value + "'")) << msg;
    const std::string accepted = kiln::accepted_values(*spec);
    EXPECT_FALSE(accepted.empty());
    EXPECT_TRUE(contains(msg, accepted)) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected KnobError, got another exception: " << e.what();
  }
}

TEST(Knobs, TableHasEveryKnobOnce) {
  const auto& table = kiln::knob_table();
  ASSERT_EQ(table.size(), kAllKnobs.size());
  std::set<std::string> names;
  for (const auto& k : table) names.insert(k.name);
  EXPECT_EQ(names, std::set<std::string>(kAllKnobs.begin(), kAllKnobs.end()));
  for (const auto& name : kAllKnobs) {
    const kiln::KnobSpec* spec = kiln::find_knob(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_EQ(std::string(spec->name), name);
  }
  EXPECT_EQ(kiln::find_knob("KILN_NOPE"), nullptr);
  EXPECT_EQ(kiln::find_knob(""), nullptr);
}

// A row that sets nothing, or another row's field, fails here; a new row
// fails until every_knob() has a case for it.
TEST(Knobs, EveryRowSetsItsField) {
  const Settings defaults = kiln::parse_settings(Env{});
  for (const auto& spec : kiln::knob_table()) {
    SCOPED_TRACE(spec.name);
    ASSERT_NE(spec.set, nullptr);
    auto c =
        std::find_if(every_knob().begin(), every_knob().end(), [&](const KnobCase& k) { return k.name == spec.name; });
    ASSERT_NE(c, every_knob().end()) << "add a case to every_knob()";
    ASSERT_NE(c->value, spec.default_value);
    Settings expected = defaults;
    c->expect(expected);
    EXPECT_TRUE(kiln::parse_settings(Env{{c->name, c->value}}) == expected);
    if (c->name != "KILN_DIFF_CASES") EXPECT_FALSE(expected == defaults);
  }
}

// Rows are applied in table order: KILN_STREAM_MIN_MB's auto reads the
// thread count, so KILN_NUM_THREADS must come first (the values:
// StreamingThresholdIsFourMiBPerThreadUnlessSet).
TEST(Knobs, StreamingThresholdFollowsTheThreads) {
  const auto& table = kiln::knob_table();
  auto row = [&](const char* name) { return kiln::find_knob(name) - table.data(); };
  EXPECT_LT(row("KILN_NUM_THREADS"), row("KILN_STREAM_MIN_MB"));
  EXPECT_EQ(kiln::parse_settings(Env{}).stream_min_mb, 4 * int64_t{kiln::auto_num_threads()});
}

TEST(Knobs, DefaultsWithAnEmptyEnvironment) {
  Settings s = kiln::parse_settings(Env{});
  EXPECT_EQ(s.device_name, "neuron");
  EXPECT_EQ(s.device_count, 2);
  EXPECT_EQ(s.device_memory_mb, kiln::auto_device_memory_mb());
  EXPECT_GE(s.device_memory_mb, 256);
  EXPECT_FALSE(s.launch_blocking);
  EXPECT_EQ(s.fallback, FallbackPolicy::Warn);
  EXPECT_FALSE(s.metrics_at_exit);
  EXPECT_TRUE(s.log.empty());
  EXPECT_FALSE(s.log_enabled("runtime"));
  EXPECT_TRUE(s.lazy);
  EXPECT_EQ(s.trace_max_ops, 1024);
  EXPECT_EQ(s.fusion_max_ops, 64);
  EXPECT_FALSE(s.fast_math);
  EXPECT_EQ(s.num_threads, kiln::auto_num_threads());
  EXPECT_EQ(s.stream_min_mb, 4 * int64_t{s.num_threads});
  EXPECT_TRUE(s.dump_dir.empty());
}

TEST(Knobs, ExplicitEnvironmentIgnoresTheProcessEnvironment) {
  const char* old = std::getenv("KILN_DEVICE_COUNT");
  std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ASSERT_EQ(setenv("KILN_DEVICE_COUNT", "abc", 1), 0);
  EXPECT_NO_THROW(kiln::parse_settings(Env{}));
  EXPECT_THROW(kiln::parse_settings(std::nullopt), KnobError);
  ASSERT_EQ(setenv("KILN_DEVICE_COUNT", "5", 1), 0);
  EXPECT_EQ(kiln::parse_settings(std::nullopt).device_count, 5);
  EXPECT_EQ(kiln::parse_settings(Env{}).device_count, 2);
  if (saved) setenv("KILN_DEVICE_COUNT", saved->c_str(), 1);
  else unsetenv("KILN_DEVICE_COUNT");
}

TEST(Knobs, InvalidDeviceCount) {
  for (const char* v :
       {"abc", "0", "-1", "17", "", "2.5", " 2", "1e3", "+", "-", "9999999999999999999", "99999999999999999999"}) {
    expect_knob_error("KILN_DEVICE_COUNT", v);
  }
}

TEST(Knobs, InvalidLaunchBlocking) {
  for (const char* v : {"2", "yes", "true", "", "01"}) expect_knob_error("KILN_LAUNCH_BLOCKING", v);
}

TEST(Knobs, InvalidFallback) {
  for (const char* v : {"loud", "WARN", ""}) expect_knob_error("KILN_FALLBACK", v);
}

TEST(Knobs, InvalidLog) {
  for (const char* v : {"bogus", "runtime,bogus", "Runtime"}) expect_knob_error("KILN_LOG", v);
}

TEST(Knobs, InvalidDeviceMemory) {
  for (const char* v : {"0", "abc", "-5", "AUTO", "", "1073741825"}) {
    expect_knob_error("KILN_DEVICE_MEMORY_MB", v);
  }
}

TEST(Knobs, InvalidCacheMaxMb) {
  for (const char* v : {"0", "-1", "abc", "1.5", "", "1073741825"}) expect_knob_error("KILN_CACHE_MAX_MB", v);
}

TEST(Knobs, InvalidDeviceName) {
  for (const char* v : {"Bad-Name", "", "1abc", "my dev", "Neuron", "_x"}) {
    expect_knob_error("KILN_DEVICE_NAME", v);
  }
}

TEST(Knobs, InvalidMetrics) {
  for (const char* v : {"x", "2", ""}) expect_knob_error("KILN_METRICS", v);
}

TEST(Knobs, ErrorMessageShowsTheDefault) {
  try {
    kiln::parse_settings(Env{{"KILN_DEVICE_COUNT", "abc"}});
    FAIL() << "expected KnobError";
  } catch (const KnobError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "1..16")) << msg;
    EXPECT_TRUE(contains(msg, "default 2")) << msg;
  }
}

TEST(Knobs, ValidValuesParse) {
  Settings s = kiln::parse_settings(Env{
      {"KILN_DEVICE_NAME", "my_dev2"},
      {"KILN_DEVICE_COUNT", "16"},
      {"KILN_DEVICE_MEMORY_MB", "512"},
      {"KILN_LAUNCH_BLOCKING", "1"},
      {"KILN_FALLBACK", "error"},
      {"KILN_METRICS", "1"},
      {"KILN_LOG", "runtime,dispatch"},
  });
  EXPECT_EQ(s.device_name, "my_dev2");
  EXPECT_EQ(s.device_count, 16);
  EXPECT_EQ(s.device_memory_mb, 512);
  EXPECT_TRUE(s.launch_blocking);
  EXPECT_EQ(s.fallback, FallbackPolicy::Error);
  EXPECT_TRUE(s.metrics_at_exit);
  EXPECT_EQ(s.log, (std::set<std::string, std::less<>>{"runtime", "dispatch"}));
  EXPECT_TRUE(s.log_enabled("runtime"));
  EXPECT_TRUE(s.log_enabled("dispatch"));
  EXPECT_FALSE(s.log_enabled("fallback"));
}

TEST(Knobs, MoreValidValues) {
  EXPECT_EQ(kiln::parse_settings(Env{{"KILN_DEVICE_MEMORY_MB", "auto"}}).device_memory_mb,
            kiln::auto_device_memory_mb());
  EXPECT_EQ(kiln::parse_settings(Env{{"KILN_DEVICE_MEMORY_MB", "1"}}).device_memory_mb, 1);
  EXPECT_EQ(kiln::parse_settings(Env{{"KILN_DEVICE_COUNT", "1"}}).device_count, 1);
  EXPECT_EQ(kiln::parse_settings(Env{{"KILN_FALLBACK", "silent"}}).fallback, FallbackPolicy::Silent);
  EXPECT_EQ(kiln::parse_settings(Env{{"KILN_FALLBACK", "warn"}}).fallback, FallbackPolicy::Warn);
  EXPECT_FALSE(kiln::parse_settings(Env{{"KILN_LAUNCH_BLOCKING", "0"}}).launch_blocking);

  Settings spaced = kiln::parse_settings(Env{{"KILN_LOG", " runtime , fallback ,"}});
  EXPECT_EQ(spaced.log, (std::set<std::string, std::less<>>{"runtime", "fallback"}));
  Settings all = kiln::parse_settings(Env{{"KILN_LOG", "all"}});
  EXPECT_TRUE(all.log_enabled("dispatch"));
  EXPECT_TRUE(all.log_enabled("anything"));
  EXPECT_TRUE(kiln::parse_settings(Env{{"KILN_LOG", ""}}).log.empty());
}

TEST(Knobs, UnknownKnobWarningsNameTheClosestKnob) {
  auto warnings = kiln::unknown_knob_warnings(Env{
      {"KILN_DEVICE_CONT", "2"},
      {"KILN_DEVICE_COUNT", "2"},  // a real knob: no warning
      {"PATH", "/bin"},            // not kiln's: no warning
  });
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "KILN_DEVICE_CONT ")) << warnings[0];
  EXPECT_TRUE(contains(warnings[0], "did you mean KILN_DEVICE_COUNT?")) << warnings[0];

  auto w2 = kiln::unknown_knob_warnings(Env{{"KILN_LOGS", "runtime"}});
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_TRUE(contains(w2[0], "did you mean KILN_LOG?")) << w2[0];

  auto w3 = kiln::unknown_knob_warnings(Env{{"KILN_LAUNCH_BLOCK", "1"}});
  ASSERT_EQ(w3.size(), 1u);
  EXPECT_TRUE(contains(w3[0], "did you mean KILN_LAUNCH_BLOCKING?")) << w3[0];

  EXPECT_TRUE(kiln::unknown_knob_warnings(Env{}).empty());
  Env all_known;
  for (const auto& k : kAllKnobs) all_known[k] = "x";
  EXPECT_TRUE(kiln::unknown_knob_warnings(all_known).empty());
}

TEST(Knobs, MarkdownContainsEveryKnob) {
  const std::string md = kiln::knobs_markdown();
  EXPECT_TRUE(contains(md, "# Knobs"));
  for (const auto& k : kiln::knob_table()) {
    EXPECT_TRUE(contains(md, std::string("`") + k.name + "`")) << k.name;
    EXPECT_TRUE(contains(md, kiln::accepted_values(k))) << k.name;
    EXPECT_TRUE(contains(md, k.help)) << k.name;
  }
}

TEST(Knobs, DescribeKnobsReportsSource) {
  auto described = kiln::describe_knobs(Env{{"KILN_DEVICE_COUNT", "4"}, {"KILN_LOG", "bogus"}});
  ASSERT_EQ(described.size(), kAllKnobs.size());
  for (const auto& [spec, value] : described) {
    const std::string name = spec->name;
    if (name == "KILN_DEVICE_COUNT") {
      EXPECT_EQ(value.source, "environment");
      EXPECT_EQ(value.value, "4");
    } else if (name == "KILN_LOG") {
      // describe_knobs does not validate.
      EXPECT_EQ(value.source, "environment");
      EXPECT_EQ(value.value, "bogus");
    } else {
      EXPECT_EQ(value.source, "default") << name;
      EXPECT_EQ(value.value, spec->default_value) << name;
    }
  }
  // Table order is kept.
  for (size_t i = 0; i < described.size(); ++i) {
    EXPECT_EQ(described[i].first, &kiln::knob_table()[i]);
  }
}

TEST(Knobs, AcceptedValuesDescriptions) {
  EXPECT_EQ(kiln::accepted_values(*kiln::find_knob("KILN_DEVICE_COUNT")), "an integer in 1..16");
  EXPECT_EQ(kiln::accepted_values(*kiln::find_knob("KILN_LAUNCH_BLOCKING")), "0 or 1");
  EXPECT_TRUE(contains(kiln::accepted_values(*kiln::find_knob("KILN_DEVICE_MEMORY_MB")), "'auto'"));
  EXPECT_EQ(kiln::accepted_values(*kiln::find_knob("KILN_FALLBACK")), "one of warn, error, silent");
}

}  // namespace

TEST(Knobs, AdaptiveEagerKnobsParse) {
  using namespace kiln;
  Settings s = parse_settings(std::map<std::string, std::string>{{"KILN_MODE", "eager"},
                                                                 {"KILN_TRACE_MAX_OPS", "7"},
                                                                 {"KILN_FUSION_MAX_OPS", "3"},
                                                                 {"KILN_FAST_MATH", "1"},
                                                                 {"KILN_NUM_THREADS", "5"},
                                                                 {"KILN_DUMP_DIR", "/tmp/kiln dump"}});
  EXPECT_FALSE(s.lazy);
  EXPECT_EQ(s.trace_max_ops, 7);
  EXPECT_EQ(s.fusion_max_ops, 3);
  EXPECT_TRUE(s.fast_math);
  EXPECT_EQ(s.num_threads, 5);
  EXPECT_EQ(s.dump_dir, "/tmp/kiln dump");
  Settings d = parse_settings(std::map<std::string, std::string>{});
  EXPECT_TRUE(d.lazy);
  EXPECT_EQ(d.num_threads, auto_num_threads());
  EXPECT_TRUE(d.dump_dir.empty());
  EXPECT_THROW(parse_settings(std::map<std::string, std::string>{{"KILN_MODE", "jit"}}), KnobError);
  EXPECT_THROW(parse_settings(std::map<std::string, std::string>{{"KILN_NUM_THREADS", "0"}}), KnobError);
  EXPECT_THROW(parse_settings(std::map<std::string, std::string>{{"KILN_FUSION_MAX_OPS", "many"}}), KnobError);
}

TEST(Knobs, StreamingThresholdIsFourMiBPerThreadUnlessSet) {
  using namespace kiln;
  using M = std::map<std::string, std::string>;
  EXPECT_EQ(parse_settings(M{{"KILN_NUM_THREADS", "3"}}).stream_min_mb, 12);
  EXPECT_EQ(parse_settings(M{{"KILN_NUM_THREADS", "3"}, {"KILN_STREAM_MIN_MB", "0"}}).stream_min_mb, 0);
  EXPECT_EQ(parse_settings(M{{"KILN_STREAM_MIN_MB", "64"}}).stream_min_mb, 64);
  EXPECT_THROW(parse_settings(M{{"KILN_STREAM_MIN_MB", "-1"}}), KnobError);
  EXPECT_THROW(parse_settings(M{{"KILN_STREAM_MIN_MB", "big"}}), KnobError);
}

// The one log sink every layer calls: enabled by KILN_LOG's channels.
TEST(Log, ChannelsFromTheKnobEnableTheSink) {
  kiln::set_log_channels(kiln::parse_settings(Env{{"KILN_LOG", "fusion,runtime"}}).log);
  EXPECT_TRUE(kiln::log_enabled("fusion"));
  EXPECT_TRUE(kiln::log_enabled("runtime"));
  EXPECT_FALSE(kiln::log_enabled("compile"));
  kiln::set_log_channels(kiln::parse_settings(Env{{"KILN_LOG", "all"}}).log);
  EXPECT_TRUE(kiln::log_enabled("compile"));
  kiln::set_log_channels({});
  EXPECT_FALSE(kiln::log_enabled("fusion"));
}

TEST(Knobs, CacheDirDefaultsToTheXdgCacheThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(kiln::parse_settings(std::map<std::string, std::string>{}).cache_dir, "/xdg/kiln");
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // the XDG spec: not absolute, ignored
  EXPECT_EQ(kiln::parse_settings(std::map<std::string, std::string>{}).cache_dir, "/home/u/.cache/kiln");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(kiln::parse_settings(std::map<std::string, std::string>{}).cache_dir, "/home/u/.cache/kiln");
  EXPECT_EQ(kiln::parse_settings(std::map<std::string, std::string>{{"KILN_CACHE_DIR", "/mine"}}).cache_dir, "/mine");
  if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) ::setenv("HOME", saved_home.c_str(), 1);
}
