// Differences between environment fingerprints (see fingerprint_difference.h).
#include "kiln/fingerprint_difference.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kiln::cache {
namespace {

using Fields = std::vector<std::pair<std::string_view, std::string_view>>;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const size_t at = s.find(sep);
    if (at != 0) out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) break;
    s.remove_prefix(at + 1);
  }
  return out;
}

Fields fields_of(std::string_view fingerprint) {
  Fields out;
  for (std::string_view f : split(fingerprint, ';')) {
    const size_t eq = f.find('=');
    if (eq == std::string_view::npos) {
      out.emplace_back("version", f);
    } else {
      out.emplace_back(f.substr(0, eq), f.substr(eq + 1));
    }
  }
  return out;
}

const std::string_view* value_of(const Fields& fields, std::string_view name) {
  for (const auto& [n, v] : fields)
    if (n == name) return &v;
  return nullptr;
}

// The items of `a` that `b` lacks, comma-separated, at most `limit` named.
std::string missing_items(std::string_view a, std::string_view b, size_t limit = 6) {
  std::vector<std::string_view> in_b = split(b, ',');
  std::sort(in_b.begin(), in_b.end());
  std::string out;
  size_t n = 0;
  for (std::string_view item : split(a, ',')) {
    if (std::binary_search(in_b.begin(), in_b.end(), item)) continue;
    if (n++ < limit) out += (out.empty() ? "" : ",") + std::string(item);
  }
  if (n > limit) out += " and " + std::to_string(n - limit) + " more";
  return out;
}

std::string quoted(std::string_view v) {
  constexpr size_t kMax = 48;  // a build hash or CPU name fits; a long list is cut
  if (v.size() > kMax) return "'" + std::string(v.substr(0, kMax)) + "...'";
  return "'" + std::string(v) + "'";
}

std::string one_difference(std::string_view name, std::string_view there, std::string_view here) {
  const std::string n(name);
  if (there.find(',') != std::string_view::npos || here.find(',') != std::string_view::npos) {
    std::string out;
    if (std::string lacks = missing_items(there, here); !lacks.empty()) out = n + ": here lacks " + lacks;
    if (std::string adds = missing_items(here, there); !adds.empty())
      out += (out.empty() ? n + ": " : ", ") + "there lacked " + adds;
    if (!out.empty()) return out;  // else the same items in another order: told below
  }
  return n + ": " + quoted(there) + " there, " + quoted(here) + " here";
}

}  // namespace

std::string fingerprint_difference(std::string_view there, std::string_view here) {
  const Fields a = fields_of(there), b = fields_of(here);
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  for (const auto& [name, value] : a) {
    const std::string_view* other = value_of(b, name);
    if (!other) {
      add(std::string(name) + ": only there");
    } else if (*other != value) {
      add(one_difference(name, value, *other));
    }
  }
  for (const auto& [name, value] : b)
    if (!value_of(a, name)) add(std::string(name) + ": only here");
  return out;
}

}  // namespace kiln::cache
