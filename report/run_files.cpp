#include "report/run_files.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "runtime/metrics_fields.h"
#include "runtime/replace_file.h"
#include "runtime/utc_time.h"
#include "runtime/regular_file.h"

namespace trainer {

namespace mf = metrics_field;

namespace {
// The object records of the lines of text[0, end) into out; *unreadable
// counts the lines that are not one (the line the run is writing right now,
// or a damaged one).
void parse_lines(const std::string& text, size_t end, std::vector<nlohmann::json>& out, int* unreadable) {
  for (size_t at = 0; at < end;) {
    const size_t nl = std::min(end, text.find('\n', at));
    if (nl > at) {
      try {
        nlohmann::json j = nlohmann::json::parse(text.begin() + at, text.begin() + nl);
        if (j.is_object()) out.push_back(std::move(j));
        else ++*unreadable;
      } catch (const std::exception&) {
        ++*unreadable;
      }
    }
    at = nl + 1;
  }
}
}  // namespace

std::vector<nlohmann::json> read_jsonl(const std::string& path, int* unreadable) {
  int ignored = 0;
  if (!unreadable) unreadable = &ignored;
  std::vector<nlohmann::json> out;
  if (!not_regular_file(path).empty()) return ++*unreadable, out;  // a FIFO would block the read
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  parse_lines(text, text.size(), out, unreadable);
  return out;
}

std::vector<nlohmann::json> read_jsonl_since(const std::string& path, long* offset) {
  std::vector<nlohmann::json> out;
  if (!not_regular_file(path).empty()) return out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  in.seekg(0, std::ios::end);
  const long size = (long)in.tellg();
  if (size < 0) return out;
  if (size < *offset) *offset = 0;  // the file began again
  if (size <= *offset) return out;
  std::string text(size - *offset, '\0');
  in.seekg(*offset);
  in.read(text.data(), (std::streamsize)text.size());
  text.resize((size_t)in.gcount());
  const size_t end = text.rfind('\n');
  if (end == std::string::npos) return out;  // no whole line yet
  *offset += (long)end + 1;
  int skipped = 0;  // damaged lines
  parse_lines(text, end, out, &skipped);
  return out;
}

long read_heartbeat_step(const std::string& dir) {
  const std::string path = dir + "/heartbeat";
  long step = -1;
  if (!not_regular_file(path).empty()) return step;
  std::ifstream in(path);
  return in >> step ? step : -1;
}

RunFiles read_run_files(const std::string& dir) {
  RunFiles f;
  f.metrics = read_jsonl(dir + "/metrics.jsonl", &f.unreadable);
  f.launches = read_jsonl(dir + "/launches.jsonl", &f.unreadable);
  f.events = read_jsonl(dir + "/events.jsonl", &f.unreadable);
  f.heartbeat_mtime = mtime_seconds(dir + "/heartbeat");
  f.heartbeat_step = read_heartbeat_step(dir);
  // Records without a step are not step records.
  std::erase_if(f.metrics, [](const nlohmann::json& r) { return !r.contains(mf::kStep) || !r[mf::kStep].is_number(); });
  return f;
}

std::map<long, const nlohmann::json*> RunFiles::latest_by_step() const {
  std::map<long, const nlohmann::json*> out;
  for (const auto& r : metrics) out[r[mf::kStep].get<long>()] = &r;
  return out;
}

std::vector<const nlohmann::json*> RunFiles::steps_after(long warmup) const {
  std::vector<const nlohmann::json*> out;
  for (const auto& [step, rec] : latest_by_step())
    if (step > warmup) out.push_back(rec);
  return out;
}

double number(const nlohmann::json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : NAN;
}

double record_time(const nlohmann::json& r) {
  const auto it = r.find(metrics_field::kTime);  // every run file's records say when they were written
  return it != r.end() && it->is_string() ? parse_iso_time(it->get<std::string>()) : NAN;
}

std::string field_text(const nlohmann::json& r, const char* key) {
  const auto it = r.find(key);
  return it == r.end() ? "" : it->is_string() ? it->get<std::string>() : it->dump();
}

TimeToGo time_to_go(const RunFiles& f, long total_steps) {
  TimeToGo t;
  if (f.metrics.empty()) return t;
  auto num = [](const nlohmann::json& r, const char* key) {
    const double v = number(r, key);
    return std::isnan(v) ? 0.0 : v;  // a damaged or edited record counts as 0
  };
  const long step = (long)num(f.metrics.back(), mf::kStep);
  double ms = 0;
  int n = 0;
  for (auto it = f.metrics.rbegin(); it != f.metrics.rend() && n < 20; ++it, ++n) ms += num(*it, mf::kStepMs);
  if (total_steps > step) t.steps_left = total_steps - step, t.step_ms = ms / n;
  return t;
}

}  // namespace trainer
