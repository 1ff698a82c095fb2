#include "report/run_report.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

#include "parallel/grid_shape.h"
#include "report/svg_chart.h"
#include "runtime/units.h"
#include "runtime/metrics.h"
#include "runtime/metrics_fields.h"
#include "runtime/regular_file.h"
#include "runtime/run_events.h"
#include "runtime/utc_time.h"

namespace trainer {

namespace {

namespace mf = metrics_field;
using nlohmann::json;
using ByStep = std::map<long, const json*>;

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
const char* color(size_t i) { return kPalette[i % 10]; }
constexpr size_t kMaxPoints = 2000, kMaxBars = 120, kMaxRows = 300;

// ---- where the step time goes ---------------------------------------------

// The parts of one step as rank 0 saw it (ms): compute is what is left of
// the step after the waits; the checkpoint save comes after the step.
// Communication: the collectives' time (not point-to-point: the pipeline's
// waits count as its bubble); the data-parallel part, where the record has
// it, is only what the step waited for (comm_dp_exposed_ms: the rest
// overlapped the backward); context parallelism's ring adds what its
// attention did not hide (comm_cp_exposed_ms).
constexpr const char* kParts[] = {"compute", "communication", "pipeline bubble", "data wait", "checkpoint"};
constexpr const char* kPartColors[] = {"#1f77b4", "#d62728", "#9467bd", "#ff7f0e", "#2ca02c"};
constexpr int kNumParts = 5;

std::array<double, kNumParts> step_parts(const json& r) {
  auto val = [&](const char* k) { const double v = number(r, k); return std::isfinite(v) ? v : 0.0; };
  const bool exposed = r.contains(mf::kCommDpExposedMs);
  double comm = (exposed ? val(mf::kCommDpExposedMs) : 0) + val(mf::kCommCpExposedMs);
  for (const GridDim& d : kGridDims) {
    if (exposed && grid_dim(d.name) == grid_dim("dp")) continue;
    for (const char* kind : {"allreduce", "allgather", "reduce_scatter"})
      comm += val((mf::comm_of(d.name, kind) + "ms").c_str());
  }
  double bubble = 0;
  if (const auto w = r.find(mf::kPpWaitMs); w != r.end() && w->is_array() && !w->empty() && (*w)[0].is_number())
    bubble = (*w)[0].get<double>();
  const double data = val(mf::kDataWaitMs), step = val(mf::kStepMs);
  return {std::max(0.0, step - comm - bubble - data), comm, bubble, data, val(mf::kCkptMs)};
}

// ---- the time axis -----------------------------------------------------------

struct TimelineItem {
  double t = NAN;
  std::string kind, label, color, detail;
  long launch = -1, step = -1;
};

// An event's kind (runtime/run_events.h), or the time axis's own: a
// "launch" of `trainer train` unsupervised, a "checkpoint" or a "skip" from
// metrics.jsonl.
const char* event_color(const std::string& kind) {
  using namespace events;
  const auto any = [&](std::initializer_list<const char*> kinds) {
    return std::any_of(kinds.begin(), kinds.end(), [&](const char* k) { return kind == k; });
  };
  if (any({Start::kKind, "launch", Allocation::kKind})) return "#1f77b4";
  if (any({Done::kKind, "checkpoint"})) return "#2ca02c";
  if (any({Preempted::kKind, Signal::kKind, Straggler::kKind, ThroughputDrop::kKind})) return "#ff7f0e";
  if (any({Diagnosis::kKind, Replace::kKind})) return "#9467bd";
  return "#d62728";  // exit, crash, hang, restart, give_up, skip
}

// The supervisor's events (or, without supervision, each launch of `trainer
// train`) and, from metrics.jsonl, checkpoints, skipped updates and
// stragglers; in time order.
std::vector<TimelineItem> timeline_items(const RunFiles& f) {
  std::vector<TimelineItem> out;
  std::string cause;  // the last failure, which the next restart is for
  for (const json& e : f.events) {
    const events::Head h = events::head(e);
    TimelineItem it{record_time(e), h.event, "", "", h.message, h.launch};
    if (const auto x = events::read<events::Exit>(e); x && x->code == 0) continue;  // "done" follows
    if (events::is<events::Straggler>(e)) continue;  // the job's report, shown from metrics.jsonl below
    if (events::is<events::Exit>(e) || events::is<events::Crash>(e) || events::is<events::Hang>(e) ||
        events::is<events::Diagnosis>(e))
      cause = it.detail;
    it.label = events::is<events::Start>(e) ? "launch " + std::to_string(it.launch) : it.kind;
    if (events::is<events::Restart>(e) && !cause.empty()) it.detail += " (after: " + cause + ")";
    it.color = event_color(it.kind);
    out.push_back(it);
  }
  // Without a supervisor (no start events; the trainer's own throughput
  // reports may be there), each launch from launches.jsonl.
  const bool supervised = std::any_of(f.events.begin(), f.events.end(),
                                      [](const json& e) { return events::is<events::Start>(e); });
  if (!supervised)
    for (size_t i = 0; i < f.launches.size(); i++) {
      const json& l = f.launches[i];
      const std::string from = field_text(l, "resumed_from");
      out.push_back({record_time(l), "launch", "launch " + std::to_string(i), event_color("launch"),
                     "trainer train starts at step " + field_text(l, "first_step") + (from.empty() ? "" : " from " + from),
                     (long)i, (long)number(l, "first_step")});
    }
  for (const json& r : f.metrics) {
    const long step = r[mf::kStep].get<long>();
    const double t = record_time(r);
    if (r.contains(mf::kCkptMs))
      out.push_back({t, "checkpoint", "ckpt " + std::to_string(step), event_color("checkpoint"),
                     "checkpoint of step " + std::to_string(step) + " saved (" + format_number(number(r, mf::kCkptMs)) +
                         " ms in the step loop)", -1, step});
    if (r.contains(mf::kUpdateSkipped))
      out.push_back({t, "skip", "skip " + std::to_string(step), event_color("skip"),
                     std::string("update of step ") + std::to_string(step) + " skipped: " +
                         (r.contains(mf::kLossSpike) ? "loss spike" : "NaN/Inf loss or gradient") + ", loss " +
                         format_number(number(r, mf::kLoss)), -1, step});
    if (r.contains(mf::kStragglers))
      out.push_back({t, events::Straggler::kKind, "slow " + field_text(r, mf::kStragglers), event_color(events::Straggler::kKind),
                     "straggler rank(s) " + field_text(r, mf::kStragglers) + " at step " + std::to_string(step) + ": " +
                         format_number(number(r, mf::kStragglerRatio)) + "x the median compute time", -1, step});
  }
  std::stable_sort(out.begin(), out.end(), [](const TimelineItem& a, const TimelineItem& b) {
    return (std::isfinite(a.t) ? a.t : 1e300) < (std::isfinite(b.t) ? b.t : 1e300);
  });
  return out;
}

// The earliest time the files name: the origin of the time axis.
double time_origin(const RunFiles& f) {
  double t0 = INFINITY;
  for (const auto* v : {&f.events, &f.launches, &f.metrics})
    for (const json& r : *v)
      if (const double t = record_time(r); std::isfinite(t)) t0 = std::min(t0, t);
  return t0;
}

// ---- charts --------------------------------------------------------------------

// Train loss, validation loss and each source's, against the step or tokens.
std::vector<Series> loss_series(const ByStep& by, double x_scale) {
  Series train{"train loss", color(0), {}, {}, false}, val{"val loss", color(1), {}, {}, true};
  std::map<std::string, Series> sources;
  for (const auto& [step, r] : by) {
    const double x = (double)step * x_scale;
    train.x.push_back(x), train.y.push_back(number(*r, mf::kLoss));
    if (r->contains(mf::kValLoss)) val.x.push_back(x), val.y.push_back(number(*r, mf::kValLoss));
    for (const auto& [k, v] : r->items())
      if (k.rfind(mf::val_loss_of(""), 0) == 0 && v.is_number()) {
        Series& s = sources[k];
        if (s.name.empty()) s = {k.substr(4), color(2 + sources.size() - 1), {}, {}, true};
        s.x.push_back(x), s.y.push_back(v.get<double>());
      }
  }
  std::vector<Series> out{train};
  if (!val.x.empty()) out.push_back(val);
  for (auto& [k, s] : sources) out.push_back(s);
  for (Series& s : out) thin(s, kMaxPoints);
  return out;
}

LineChart metric_chart(const ByStep& by, const std::string& id, const std::string& title, const char* key,
                       const std::string& y_label, double scale) {
  Series s{title, color(0), {}, {}, false};
  for (const auto& [step, r] : by) s.x.push_back((double)step), s.y.push_back(number(*r, key) * scale);
  thin(s, kMaxPoints);
  return LineChart{id, title, "step", y_label, AxisFormat::Number, {s}, {}, true};
}

// Mixture-of-Experts: per MoE layer, the most tokens one expert got over
// its experts' mean (1: balanced), against the step; none without experts.
std::optional<LineChart> moe_load_chart(const ByStep& by) {
  std::map<size_t, Series> layers;
  for (const auto& [step, r] : by) {
    if (!r->contains(mf::kMoeTokensMax) || !r->contains(mf::kMoeTokensMean)) continue;
    const json &mx = (*r)[mf::kMoeTokensMax], &mean = (*r)[mf::kMoeTokensMean];
    for (size_t l = 0; l < mx.size() && l < mean.size(); l++) {
      if (!mx[l].is_number() || !mean[l].is_number() || mean[l].get<double>() <= 0) continue;  // (a dense layer)
      Series& s = layers[l];
      if (s.name.empty()) s = {"layer " + std::to_string(l), color(layers.size() - 1), {}, {}, false};
      s.x.push_back((double)step), s.y.push_back(mx[l].get<double>() / mean[l].get<double>());
    }
  }
  if (layers.empty()) return std::nullopt;
  LineChart c{"moe_load", "Expert load: most tokens an expert got / the mean, per MoE layer", "step",
              "max / mean", AxisFormat::Number, {}, {}, false};
  for (auto& [l, s] : layers) thin(s, kMaxPoints), c.series.push_back(s);
  return c;
}

StackedBars step_time_chart(const ByStep& by) {
  StackedBars c{"step_time", "Where the step time goes (rank 0)", "ms", {}, {}, {}, {}};
  for (int k = 0; k < kNumParts; k++) c.categories.push_back(kParts[k]), c.colors.push_back(kPartColors[k]);
  c.values.assign(kNumParts, {});
  // Long runs: each bar is the mean of consecutive logged steps.
  const size_t per_bar = std::max<size_t>(1, (by.size() + kMaxBars - 1) / kMaxBars);
  size_t in_bar = 0;
  std::array<double, kNumParts> sum{};
  for (auto it = by.begin(); it != by.end(); ++it) {
    const auto p = step_parts(*it->second);
    for (int k = 0; k < kNumParts; k++) sum[k] += p[k];
    if (++in_bar == per_bar || std::next(it) == by.end()) {
      c.x.push_back((double)it->first);
      for (int k = 0; k < kNumParts; k++) c.values[k].push_back(sum[k] / (double)in_bar);
      in_bar = 0, sum = {};
    }
  }
  return c;
}

// Each category's peak (largest over the logged steps) against the plan.
std::array<double, kMemKinds> measured_memory(const ByStep& by) {
  std::array<double, kMemKinds> peak;
  peak.fill(NAN);
  for (const auto& [step, r] : by)
    for (int k = 0; k < kMemKinds; k++) {
      const double v = number(*r, mf::mem_peak_of(mem_name((Mem)k)).c_str());
      if (std::isfinite(v)) peak[k] = std::isfinite(peak[k]) ? std::max(peak[k], v) : v;
    }
  return peak;
}

LineChart timeline_chart(const RunFiles& f, const std::vector<TimelineItem>& items, double t0) {
  Series loss{"train loss", color(0), {}, {}, false}, val{"val loss", color(1), {}, {}, true};
  long prev = -1;
  for (const json& r : f.metrics) {
    const double t = record_time(r) - t0;
    const long step = r[mf::kStep].get<long>();
    if (step <= prev) loss.x.push_back(t), loss.y.push_back(NAN);  // a relaunch replays: break the line
    prev = step;
    loss.x.push_back(t), loss.y.push_back(number(r, mf::kLoss));
    if (r.contains(mf::kValLoss)) val.x.push_back(t), val.y.push_back(number(r, mf::kValLoss));
  }
  thin(loss, kMaxPoints), thin(val, kMaxPoints);
  LineChart c{"timeline", "Loss and events against wall-clock time", "time since the run started", "loss",
              AxisFormat::Duration, {loss}, {}, false};
  if (!val.x.empty()) c.series.push_back(val);
  size_t checkpoints = 0;
  for (const TimelineItem& it : items) checkpoints += it.kind == "checkpoint";
  for (const TimelineItem& it : items) {
    if (!std::isfinite(it.t) || (it.kind == "checkpoint" && checkpoints > 60)) continue;
    c.markers.push_back({it.t - t0, it.kind, it.label, it.color, it.detail});
  }
  return c;
}

// ---- tables ----------------------------------------------------------------------

// A table row of data cells, each escaped: the route by which text from the
// run's files (any field may have been edited or injected) reaches a table.
std::string cells(std::initializer_list<std::string> values, const std::string& key = "") {
  std::string s = "<tr" + (key.empty() ? "" : " data-key=\"" + html_escape(key) + "\"") + ">";
  for (const std::string& v : values) s += "<td>" + html_escape(v) + "</td>";
  return s + "</tr>\n";
}

std::string row(const std::string& a, const std::string& b, const std::string& id = "") {
  return "<tr" + (id.empty() ? "" : " data-key=\"" + id + "\"") + "><th>" + html_escape(a) + "</th><td>" +
         html_escape(b) + "</td></tr>\n";
}

std::string run_state(const RunFiles& f, const ReportFacts& facts, long last_step) {
  for (auto e = f.events.rbegin(); e != f.events.rend(); ++e) {
    const events::Head h = events::head(*e);
    if (events::is<events::Done>(*e)) return "finished";
    if (events::is<events::Paused>(*e)) return "paused: " + h.message;
    if (events::is<events::GiveUp>(*e)) return "stopped: " + h.message;
    if (events::is<events::Preempted>(*e)) return "preempted at step " + std::to_string(last_step) + " (requeue to go on)";
    if (events::is<events::Start>(*e)) break;
  }
  if (facts.steps > 0 && last_step >= facts.steps) return "finished";
  const double age = facts.now - f.heartbeat_mtime;
  if (f.heartbeat_mtime > 0 && age < 300) return "running (heartbeat " + format_duration(age) + " ago)";
  if (f.heartbeat_mtime > 0) return "not running (last heartbeat " + format_duration(age) + " ago)";
  return "not started";
}

std::string summary_table(const RunFiles& f, const ReportFacts& facts, const ByStep& by,
                          const std::vector<TimelineItem>& items) {
  const long last = by.empty() ? 0 : by.rbegin()->first;
  std::vector<double> tps, mfu, ms;
  double lowest = INFINITY, final_val = NAN;
  for (const auto& [step, r] : by) {
    lowest = std::min(lowest, number(*r, mf::kLoss));
    if (r->contains(mf::kValLoss)) final_val = number(*r, mf::kValLoss);
    if (step == 1) continue;  // the first step pays for warming up
    tps.push_back(number(*r, mf::kTokensPerS)), mfu.push_back(number(*r, mf::kMfu)), ms.push_back(number(*r, mf::kStepMs));
  }
  auto median = [](std::vector<double> v) {
    std::erase_if(v, [](double x) { return !std::isfinite(x); });
    return v.empty() ? (double)NAN : median_of(v);
  };
  auto count = [&](const char* kind) {
    return (long)std::count_if(items.begin(), items.end(), [&](const TimelineItem& i) { return i.kind == kind; });
  };
  const long launches = std::max({count(events::Start::kKind), (long)f.launches.size(), f.metrics.empty() ? 0L : 1L});
  std::string s = "<table class=\"facts\" id=\"summary\">\n";
  s += row("state", run_state(f, facts, last), "state");
  s += row("last step", std::to_string(last) + (facts.steps > 0 ? " of " + std::to_string(facts.steps) : ""), "last_step");
  if (facts.tokens_per_step > 0)
    s += row("tokens trained", format_count((double)last * facts.tokens_per_step), "tokens");
  if (!by.empty()) {
    s += row("final train loss", format_number(number(*by.rbegin()->second, mf::kLoss)), "final_loss");
    s += row("lowest train loss", format_number(lowest), "lowest_loss");
  }
  if (std::isfinite(final_val)) s += row("final val loss", format_number(final_val), "final_val_loss");
  s += row("median tokens/s (logged steps after the first)", format_number(median(tps)), "median_tokens_per_s");
  s += row("median MFU", format_number(100 * median(mfu)) + " %", "median_mfu");
  s += row("median step time", format_number(median(ms)) + " ms", "median_step_ms");
  s += row("launches", std::to_string(launches), "launches");
  s += row("restarts", std::to_string(count(events::Restart::kKind)), "restarts");
  s += row("checkpoints saved", std::to_string(count("checkpoint")), "checkpoints");
  s += row("updates skipped (NaN or spike)", std::to_string(count("skip")), "skipped");
  s += row("straggler reports", std::to_string(count(events::Straggler::kKind)), "stragglers");
  if (f.unreadable) s += row("lines skipped (being written, or damaged)", std::to_string(f.unreadable), "unreadable");
  return s + "</table>\n";
}

std::string breakdown_table(const ByStep& by) {
  std::array<double, kNumParts> sum{};
  for (const auto& [step, r] : by) {
    const auto p = step_parts(*r);
    for (int k = 0; k < kNumParts; k++) sum[k] += p[k];
  }
  double total = 0;
  for (double v : sum) total += v;
  std::string s = "<table class=\"numbers\" id=\"breakdown\"><tr><th>part</th><th>mean ms per logged step</th>"
                  "<th>share</th></tr>\n";
  for (int k = 0; k < kNumParts; k++)
    s += "<tr data-key=\"" + std::string(kParts[k]) + "\"><td>" + kParts[k] + "</td><td>" +
         format_number(by.empty() ? NAN : sum[k] / (double)by.size()) + "</td><td>" +
         format_number(total > 0 ? 100 * sum[k] / total : NAN) + " %</td></tr>\n";
  return s + "</table>\n";
}

// Rank 0's communication per logged step, by group and kind of collective
// (bytes as a ring moves them, time inside the calls), and the data-parallel
// part the step waited for (ZeRO-3: its gathers' waits included); rows
// that moved nothing left out.
std::string communication_table(const ByStep& by) {
  const double n = by.empty() ? NAN : (double)by.size();
  auto mean = [&](const std::string& key) {
    double sum = 0;
    for (const auto& [step, r] : by)
      if (const double v = number(*r, key.c_str()); std::isfinite(v)) sum += v;
    return sum / n;
  };
  std::string s = "<table class=\"numbers\" id=\"communication\"><tr><th>group</th><th>collective</th>"
                  "<th>mean MB per logged step</th><th>mean ms</th></tr>\n";
  for (const GridDim& d : kGridDims)
    for (const char* kind : {"allreduce", "allgather", "reduce_scatter", "p2p"}) {
      const std::string key = mf::comm_of(d.name, kind);
      const double mb = mean(key + "bytes") / 1e6, ms = mean(key + "ms");
      if (!(mb > 0)) continue;
      s += "<tr data-key=\"" + std::string(d.name) + "_" + kind + "\"><td>" + d.name + "</td><td>" + kind +
           "</td><td>" + format_number(mb) + "</td><td>" + format_number(ms) + "</td></tr>\n";
    }
  if (const double ms = mean(mf::kCommDpExposedMs); ms > 0)
    s += "<tr data-key=\"dp_exposed\"><td>dp</td><td>exposed (waited for)</td><td></td><td>" + format_number(ms) +
         "</td></tr>\n";
  return s + "</table>\n";
}

std::string memory_table(const std::array<double, kMemKinds>& peak, const ReportFacts& facts) {
  std::string s = "<table class=\"numbers\" id=\"memory\"><tr><th>category</th><th>measured peak MB</th>"
                  "<th>plan MB</th><th>measured / plan</th></tr>\n";
  for (int k = 0; k < kMemKinds; k++) {
    const double plan = facts.has_plan ? facts.plan_mb[k] : NAN;
    s += "<tr data-key=\"" + std::string(mem_name((Mem)k)) + "\"><td>" + mem_name((Mem)k) + "</td><td>" +
         format_number(peak[k]) + "</td><td>" + format_number(plan) + "</td><td>" +
         format_number(plan > 0 ? peak[k] / plan : NAN) + "</td></tr>\n";
  }
  return s + "</table>\n";
}

std::string events_table(const std::vector<TimelineItem>& items, double t0) {
  std::string s = "<table class=\"numbers\" id=\"events\"><tr><th>time (UTC)</th><th>since start</th><th>event</th>"
                  "<th>launch</th><th>step</th><th>what happened</th></tr>\n";
  size_t shown = 0;
  for (const TimelineItem& it : items) {
    if (++shown > kMaxRows) {
      s += "<tr><td colspan=\"6\">" + std::to_string(items.size() - kMaxRows) +
           " more: see events.jsonl and metrics.jsonl</td></tr>\n";
      break;
    }
    s += cells({std::isfinite(it.t) ? iso_time(it.t) : std::string("-"), format_duration(it.t - t0), it.kind,
                it.launch >= 0 ? std::to_string(it.launch) : "", it.step >= 0 ? std::to_string(it.step) : "", it.detail},
               it.kind);
  }
  return s + "</table>\n";
}

// "dp 2 x pp 2 x tp 2": a launch record's sizes as a layout is written (the
// dimensions it names at 1, the others where they split the job).
std::string launch_grid(const json& l) {
  std::string s;
  each_grid_dim_slowest_first([&](const GridDim& d, GridDims) {
    const std::string n = field_text(l, d.name);
    if (n.empty() || (!d.named_at_1 && n == "1")) return;
    s += (s.empty() ? "" : " x ") + std::string(d.name) + " " + n;
  });
  return s;
}

std::string launches_table(const RunFiles& f) {
  std::string s = "<table class=\"numbers\" id=\"launches\"><tr><th>started (UTC)</th><th>from step</th>"
                  "<th>trainer</th><th>backend, device</th><th>ranks</th><th>host</th><th>libraries</th></tr>\n";
  for (const json& l : f.launches) {
    const std::string device = field_text(l, "device");
    s += cells({field_text(l, "time"), field_text(l, "first_step"), field_text(l, "trainer") + " (git " + field_text(l, "git") + ")",
                field_text(l, "backend") + (device.empty() ? "" : ", " + device),
                field_text(l, "ranks") + " = " + launch_grid(l),
                field_text(l, "host"), field_text(l, "libraries")});
  }
  return s + "</table>\n";
}

const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ccc}"
    ".sub{color:#555;margin:0 0 16px}.grid{display:flex;flex-wrap:wrap;gap:12px}"
    "svg.chart{border:1px solid #ddd;background:#fff}svg .title{font-size:13px;font-weight:bold}"
    "svg .legend,svg .tick,svg .mlabel{font-size:10px}svg .axis{font-size:11px;fill:#444}"
    "svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}"
    "table{border-collapse:collapse;font-size:13px;margin:4px 0 12px}"
    "th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}"
    "table.facts th{background:#f6f6f6;font-weight:normal;color:#444}.cols{display:flex;gap:24px;flex-wrap:wrap}"
    ".note{color:#555;font-size:12px;max-width:1240px}";

}  // namespace

// How every report begins (is_run_report knows one by it).
const std::string kPageStart =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Run report: ";

bool is_run_report(const std::string& path) {
  if (!not_regular_file(path).empty()) return false;
  std::ifstream f(path, std::ios::binary);
  std::string head(kPageStart.size(), '\0');
  return f.read(head.data(), (std::streamsize)head.size()) && head == kPageStart;
}

std::string render_report(const RunFiles& f, const ReportFacts& facts) {
  const ByStep by = f.latest_by_step();
  const std::vector<TimelineItem> items = timeline_items(f);
  const double t0 = time_origin(f);
  std::string h = kPageStart + html_escape(facts.run_name) + "</title><style>" + kStyle + "</style></head><body>\n";
  h += "<h1>Run " + html_escape(facts.run_name) + "</h1>\n<p class=\"sub\">" + html_escape(facts.run_dir) +
       " &middot; report made " + iso_time(facts.now) + " by " + html_escape(facts.generated_by) +
       " from metrics.jsonl, launches.jsonl, events.jsonl and the heartbeat</p>\n";
  h += "<div class=\"cols\"><div><h2>Summary</h2>" + summary_table(f, facts, by, items) + "</div><div><h2>Recipe</h2>";
  if (!facts.recipe_error.empty()) h += "<p class=\"note\">" + html_escape(facts.recipe_error) + "</p>";
  h += "<table class=\"facts\" id=\"recipe\">\n";
  for (const auto& [k, v] : facts.recipe) h += row(k, v);
  h += "</table></div></div>\n<h2>Launches</h2>" + launches_table(f);

  h += "<h2>Training</h2><div class=\"grid\">\n";
  h += render(LineChart{"loss_step", "Loss against step", "step", "loss", AxisFormat::Number, loss_series(by, 1), {}, false});
  if (facts.tokens_per_step > 0)
    h += render(LineChart{"loss_tokens", "Loss against tokens", "tokens", "loss", AxisFormat::Tokens,
                          loss_series(by, facts.tokens_per_step), {}, false});
  h += render(metric_chart(by, "lr", "Learning rate", mf::kLr, "learning rate", 1));
  h += render(metric_chart(by, "grad_norm", "Gradient norm (before clipping)", mf::kGradNorm, "norm", 1));
  h += render(metric_chart(by, "tokens_per_s", "Tokens per second", mf::kTokensPerS, "tokens/s", 1));
  h += render(metric_chart(by, "mfu", "Model FLOPs utilisation", mf::kMfu, "MFU %", 100));
  if (const auto moe = moe_load_chart(by)) h += render(*moe);
  h += "</div>\n<h2>Step time</h2><div class=\"grid\">" + render(step_time_chart(by)) + "<div>" + breakdown_table(by) +
       "<p class=\"note\">Rank 0's view of each logged step. Communication: time inside tensor- and "
       "pipeline-parallel collectives, and the data-parallel reduction's exposed part (what the step waited for "
       "after the backward; buckets overlap the rest); pipeline bubble: time its stage waited for another's "
       "activations or gradients; data wait: the slowest rank's wait on its loader; checkpoint: the save's time "
       "in the step loop (a snapshot when saves are asynchronous); compute: the rest of the step.</p>" +
       communication_table(by) +
       "<p class=\"note\">Rank 0's collectives by group (dp: over dp x cp). Under ZeRO-2 and 3 the data-parallel "
       "reduce-scatters carry the gradients and, under ZeRO-3, the all-gathers the weights; exposed: what the step "
       "waited for of them.</p></div></div>\n";

  const auto peak = measured_memory(by);
  GroupedBars mem{"memory", "Memory by category, rank 0 (MB)", "MB", {}, {"measured peak", "plan"},
                  {color(0), "#aaaaaa"}, {{}, {}}};
  for (int k = 0; k < kMemKinds; k++) {
    mem.groups.push_back(mem_name((Mem)k));
    mem.values[0].push_back(peak[k]);
    mem.values[1].push_back(facts.has_plan ? facts.plan_mb[k] : NAN);
  }
  h += "<h2>Memory</h2><div class=\"grid\">" + render(mem) + "<div>" + memory_table(peak, facts) +
       "<p class=\"note\">" + html_escape(facts.has_plan ? "Plan: " + facts.plan_note : "No plan: the recipe could not be read.") +
       "</p></div></div>\n";

  h += "<h2>Timeline</h2>";
  if (std::isfinite(t0)) h += render(timeline_chart(f, items, t0));
  else h += "<p class=\"note\">No wall-clock times in this run's files (written by an older trainer).</p>";
  h += events_table(items, std::isfinite(t0) ? t0 : NAN);
  return h + "</body></html>\n";
}

}  // namespace trainer
