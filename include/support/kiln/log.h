// Logging to stderr by KILN_LOG channel ("runtime", "fusion", ...): one sink
// for every layer, so a layer logs by calling down, never through a callback
// handed to it from above.
#pragma once

#include <set>
#include <string>
#include <string_view>

namespace kiln {

// Whether `channel` is among `channels` ("all" enables every channel).
inline bool channel_in(const std::set<std::string, std::less<>>& channels, std::string_view channel) {
  return channels.count(channel) != 0 || channels.count("all") != 0;
}

// Sets the enabled channels (from KILN_LOG, at start-up). Thread-safe.
void set_log_channels(const std::set<std::string, std::less<>>& channels);
bool log_enabled(std::string_view channel);
// Prints "[kiln:<channel>] <message>" to stderr when the channel is enabled.
void log(std::string_view channel, const std::string& message);

}  // namespace kiln
