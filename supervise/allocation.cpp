#include "supervise/allocation.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>

#include "runtime/host_name.h"

namespace trainer {

namespace {

[[noreturn]] void malformed(const std::string& list, const std::string& why) {
  throw std::invalid_argument("host list \"" + list + "\": " + why);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// One bracket group's contents ("01-03,7") as its numbers, as text: a range
// keeps the width of its first bound ("08-10" -> 08 09 10).
std::vector<std::string> expand_ranges(const std::string& list, const std::string& inside) {
  std::vector<std::string> out;
  std::stringstream parts(inside);
  for (std::string part; std::getline(parts, part, ',');) {
    const size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) malformed(list, "\"" + part + "\" is not a number or a range a-b");
    if (lo.size() > 9 || hi.size() > 9) malformed(list, "\"" + part + "\" holds a number of more than 9 digits");
    const long a = std::stol(lo), b = std::stol(hi);
    if (b < a) malformed(list, "the range " + part + " runs backwards");
    if (b - a > 100000) malformed(list, "the range " + part + " is too long");
    for (long i = a; i <= b; i++) {
      std::string n = std::to_string(i);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
      out.push_back(n);
    }
  }
  return out;
}

// One name with bracket groups ("rack[1-2]n[3-4]"), multiplied out with the
// first group varying slowest.
std::vector<std::string> expand_name(const std::string& list, const std::string& name) {
  std::vector<std::string> out = {""};
  for (size_t i = 0; i < name.size();) {
    const size_t open = name.find('[', i);
    const std::string text = name.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (text.find(']') != std::string::npos) malformed(list, "a ']' without its '['");
    for (std::string& o : out) o += text;
    if (open == std::string::npos) break;
    const size_t close = name.find(']', open);
    if (close == std::string::npos) malformed(list, "a '[' without its ']'");
    std::vector<std::string> next;
    for (const std::string& o : out)
      for (const std::string& n : expand_ranges(list, name.substr(open + 1, close - open - 1))) next.push_back(o + n);
    out = std::move(next);
    i = close + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  std::string name;
  int depth = 0;
  const auto flush = [&] {
    if (name.empty()) malformed(list, "an empty name");
    for (std::string& h : expand_name(list, name)) hosts.push_back(std::move(h));
    name.clear();
  };
  for (char c : list) {
    if (c == ',' && depth == 0) {
      flush();
      continue;
    }
    if (c == '[' && ++depth > 1) malformed(list, "brackets inside brackets");
    if (c == ']' && --depth < 0) malformed(list, "a ']' without its '['");
    if (std::isspace((unsigned char)c)) malformed(list, "a space");
    name += c;
  }
  if (depth != 0) malformed(list, "a '[' without its ']'");
  flush();
  return hosts;
}

std::vector<std::string> parse_hostfile(const std::string& text) {
  std::vector<std::string> hosts;
  std::stringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    n++;
    line = line.substr(0, line.find('#'));
    std::stringstream words(line);
    std::string host, option;
    if (!(words >> host)) continue;
    while (words >> option)
      if (option.find('=') == std::string::npos)
        throw std::invalid_argument("hostfile line " + std::to_string(n) + ": \"" + option +
                                    "\" is not an option (name=value) after the host name");
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  return hosts;
}

Allocation::Allocation(std::vector<std::string> hosts, int nodes) : hosts_(std::move(hosts)), nodes_(nodes) {
  if (nodes_ <= 0) nodes_ = (int)hosts_.size();
  if (nodes_ > (int)hosts_.size())
    throw std::invalid_argument("launch.nodes = " + std::to_string(nodes_) + " but the allocation has " +
                                std::to_string(hosts_.size()) + " host(s)");
  for (size_t i = 0; i < hosts_.size(); i++) {
    // One host name as mpirun --host and srun -w take it: a ',' would be two
    // hosts, a ':' a slot count, a leading '-' an option.
    const std::string& h = hosts_[i];
    if (h.empty() || h[0] == '-' || h[0] == '.' ||
        !std::all_of(h.begin(), h.end(), [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '-' || c == '_'; }))
      throw std::invalid_argument("host \"" + h + "\" is not one host name (letters, digits, '.', '-' and '_'; no "
                                  "',' or ':', which the launcher would read as a list or a slot count)");
    if (std::find(hosts_.begin(), hosts_.begin() + i, hosts_[i]) != hosts_.begin() + i)
      throw std::invalid_argument("the allocation lists host " + hosts_[i] + " twice");
  }
}

void Allocation::shrink(int nodes) {
  if (nodes < 1 || nodes > nodes_)
    throw std::invalid_argument("cannot shrink a launch of " + std::to_string(nodes_) + " node(s) to " +
                                std::to_string(nodes));
  nodes_ = nodes;
}

std::vector<std::string> Allocation::launch_hosts() const {
  std::vector<std::string> out;
  for (const std::string& h : hosts_)
    if ((int)out.size() < nodes_ && !excluded_.count(h)) out.push_back(h);
  if ((int)out.size() < nodes_) out.clear();
  return out;
}

std::vector<std::string> Allocation::spares() const {
  const std::vector<std::string> used = launch_hosts();
  std::vector<std::string> out;
  for (const std::string& h : hosts_)
    if (!excluded_.count(h) && std::find(used.begin(), used.end(), h) == used.end()) out.push_back(h);
  return out;
}

std::vector<std::string> Allocation::usable() const {
  std::vector<std::string> out = launch_hosts();
  for (const std::string& h : spares()) out.push_back(h);
  return out;
}

bool Allocation::exclude(const std::string& host, const std::string& why) {
  if (std::find(hosts_.begin(), hosts_.end(), host) == hosts_.end() || excluded_.count(host)) return false;
  excluded_[host] = why;
  return true;
}

std::string Allocation::find(const std::string& name) const {
  for (const std::string& h : hosts_)
    if (h == name) return h;
  for (const std::string& h : hosts_)
    if (same_host(h, name)) return h;
  return "";
}

}  // namespace trainer
