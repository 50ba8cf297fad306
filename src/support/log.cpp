// The KILN_LOG sink (see include/support/kiln/log.h).
#include "kiln/log.h"

#include <atomic>
#include <iostream>

namespace kiln {
namespace {
// Replaced, never freed: a reader on another thread may still hold the old set.
std::atomic<const std::set<std::string, std::less<>>*> g_channels{nullptr};
}  // namespace

void set_log_channels(const std::set<std::string, std::less<>>& channels) {
  g_channels.store(new std::set<std::string, std::less<>>(channels), std::memory_order_release);
}

bool log_enabled(std::string_view channel) {
  const auto* channels = g_channels.load(std::memory_order_acquire);
  return channels != nullptr && channel_in(*channels, channel);
}

void log(std::string_view channel, const std::string& message) {
  if (!log_enabled(channel)) return;
  std::cerr << "[kiln:" << channel << "] " << message << std::endl;
}

}  // namespace kiln
