#include "report/svg_chart.h"
#include "runtime/units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace trainer {

namespace {

// The drawing box every chart shares (px).
constexpr double kW = 620, kH = 280, kLeft = 72, kRight = 18, kTop = 40, kBottom = 46;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string px(double v) { return fmt("%.2f", v); }

// Ticks at 1, 2 or 5 times a power of ten, about `want` of them over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int want) {
  const double raw = (hi - lo) / want;
  const double p = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

// [lo, hi] of the finite values, widened when empty or flat.
std::pair<double, double> extent(const std::vector<const std::vector<double>*>& vs) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto* v : vs)
    for (double x : *v)
      if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!(lo <= hi)) return {0, 1};
  if (lo == hi) {
    const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    return {lo - d, hi + d};
  }
  return {lo, hi};
}

struct Axis {
  double v0, v1, p0, p1;  // data range and where it lands
  double map(double v) const { return p0 + (v - v0) / (v1 - v0) * (p1 - p0); }
};

std::string svg_open(const std::string& id, const Axis& x, const Axis& y, const std::string& kind) {
  return "<svg class=\"chart\" id=\"" + html_escape(id) + "\" data-kind=\"" + kind + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         fmt("%.0f", kW) + "\" height=\"" + fmt("%.0f", kH) + "\" viewBox=\"0 0 " + fmt("%.0f", kW) + " " +
         fmt("%.0f", kH) + "\" data-x0=\"" + fmt("%.17g", x.v0) + "\" data-x1=\"" + fmt("%.17g", x.v1) +
         "\" data-y0=\"" + fmt("%.17g", y.v0) + "\" data-y1=\"" + fmt("%.17g", y.v1) + "\" data-px0=\"" +
         px(x.p0) + "\" data-px1=\"" + px(x.p1) + "\" data-py0=\"" + px(y.p0) + "\" data-py1=\"" + px(y.p1) + "\">\n";
}

std::string text(double x, double y, const std::string& s, const std::string& attrs = "") {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" " + attrs + ">" + html_escape(s) + "</text>\n";
}

// Title on the left, legend entries to its right.
std::string heading(const std::string& title, const std::vector<std::string>& names,
                    const std::vector<std::string>& colors) {
  std::string s = text(kLeft, 18, title, "class=\"title\"");
  double x = kW - kRight;
  for (size_t i = names.size(); i-- > 0;) {
    x -= 6.2 * (double)names[i].size() + 22;
    s += "<rect x=\"" + px(x) + "\" y=\"25\" width=\"12\" height=\"8\" fill=\"" + colors[i] + "\"/>";
    s += text(x + 16, 33, names[i], "class=\"legend\"");
  }
  return s;
}

std::string tick_label(double v, AxisFormat f, double unit) {
  if (f == AxisFormat::Tokens) return format_count(v);
  if (f == AxisFormat::Duration) return format_number(v / unit) + (unit == 1 ? " s" : unit == 60 ? " min" : " h");
  return format_number(v);
}

// Horizontal grid lines with their value labels on the left.
std::string y_grid(const Axis& x, const Axis& y) {
  std::string s;
  for (double t : nice_ticks(y.v0, y.v1, 5)) {
    const double p = y.map(t);
    s += "<line class=\"grid\" x1=\"" + px(x.p0) + "\" x2=\"" + px(x.p1) + "\" y1=\"" + px(p) + "\" y2=\"" + px(p) + "\"/>";
    s += text(x.p0 - 6, p + 4, format_number(t), "text-anchor=\"end\" class=\"tick\"");
  }
  return s;
}

// Grid lines, tick labels and axis titles.
std::string axes(const Axis& x, const Axis& y, AxisFormat xf, const std::string& xl, const std::string& yl) {
  std::string s;
  const double span = x.v1 - x.v0;
  const double unit = xf != AxisFormat::Duration ? 1 : span < 300 ? 1 : span < 3 * 3600 ? 60 : 3600;
  for (double t : nice_ticks(x.v0 / unit, x.v1 / unit, 6)) {
    const double p = x.map(t * unit);
    s += "<line class=\"grid\" x1=\"" + px(p) + "\" x2=\"" + px(p) + "\" y1=\"" + px(y.p1) + "\" y2=\"" + px(y.p0) + "\"/>";
    s += text(p, y.p0 + 15, tick_label(t * unit, xf, unit), "text-anchor=\"middle\" class=\"tick\"");
  }
  s += y_grid(x, y);
  s += "<rect class=\"frame\" x=\"" + px(x.p0) + "\" y=\"" + px(y.p1) + "\" width=\"" + px(x.p1 - x.p0) +
       "\" height=\"" + px(y.p0 - y.p1) + "\"/>\n";
  s += text((x.p0 + x.p1) / 2, kH - 8, xl, "text-anchor=\"middle\" class=\"axis\"");
  s += text(14, (y.p0 + y.p1) / 2, yl,
            "text-anchor=\"middle\" class=\"axis\" transform=\"rotate(-90 14 " + px((y.p0 + y.p1) / 2) + ")\"");
  return s;
}

std::string series_path(const Series& s, const Axis& x, const Axis& y) {
  std::string d, dots;
  bool pen = false;
  for (size_t i = 0; i < s.x.size(); i++) {
    if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) {
      pen = false;
      continue;
    }
    d += (pen ? " L" : (d.empty() ? "M" : " M")) + px(x.map(s.x[i])) + "," + px(y.map(s.y[i]));
    pen = true;
    if (s.dots)
      dots += "<circle cx=\"" + px(x.map(s.x[i])) + "\" cy=\"" + px(y.map(s.y[i])) + "\" r=\"2.5\" fill=\"" +
              s.color + "\"/>";
  }
  if (d.empty()) return "";
  return "<path class=\"series\" data-series=\"" + html_escape(s.name) + "\" fill=\"none\" stroke=\"" + s.color +
         "\" stroke-width=\"1.6\" d=\"" + d + "\"/>\n" + dots + "\n";
}

// Vertical lines with a hover title; labels where there is room for them.
std::string markers(const std::vector<Marker>& ms, const Axis& x, const Axis& y) {
  std::string s;
  double last_label = -1e9;
  for (const Marker& m : ms) {
    if (!std::isfinite(m.x)) continue;
    const double p = x.map(m.x);
    s += "<g class=\"marker\" data-event=\"" + html_escape(m.kind) + "\"><title>" + html_escape(m.label) +
         (m.detail.empty() ? "" : ": " + html_escape(m.detail)) + "</title><line x1=\"" + px(p) + "\" x2=\"" +
         px(p) + "\" y1=\"" + px(y.p1) + "\" y2=\"" + px(y.p0) + "\" stroke=\"" + m.color +
         "\" stroke-width=\"1.2\" stroke-dasharray=\"4,3\"/>";
    if (p - last_label > 34) {
      s += text(p + 2, y.p1 + 10, m.label, "class=\"mlabel\" fill=\"" + m.color + "\"");
      last_label = p;
    }
    s += "</g>\n";
  }
  return s;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

void thin(Series& s, size_t limit) {
  if (s.x.size() <= limit) return;
  const size_t k = (s.x.size() + limit - 1) / limit;
  Series t = s;
  t.x.clear(), t.y.clear();
  for (size_t i = 0; i < s.x.size(); i += k) t.x.push_back(s.x[i]), t.y.push_back(s.y[i]);
  if ((s.x.size() - 1) % k) t.x.push_back(s.x.back()), t.y.push_back(s.y.back());
  s = std::move(t);
}

std::string render(const LineChart& c) {
  std::vector<const std::vector<double>*> xs, ys;
  for (const Series& s : c.series) xs.push_back(&s.x), ys.push_back(&s.y);
  std::vector<double> mx;
  for (const Marker& m : c.markers) mx.push_back(m.x);
  xs.push_back(&mx);
  auto [x0, x1] = extent(xs);
  auto [y0, y1] = extent(ys);
  if (c.y_from_zero) y0 = std::min(0.0, y0);
  const double pad = (y1 - y0) * 0.06;
  y1 += pad;
  if (!c.y_from_zero || y0 < 0) y0 -= pad;
  const Axis x{x0, x1, kLeft, kW - kRight}, y{y0, y1, kH - kBottom, kTop};
  std::vector<std::string> names, colors;
  for (const Series& s : c.series) names.push_back(s.name), colors.push_back(s.color);
  std::string out = svg_open(c.id, x, y, "line") + heading(c.title, names, colors) +
                    axes(x, y, c.x_format, c.x_label, c.y_label);
  out += markers(c.markers, x, y);
  for (const Series& s : c.series) out += series_path(s, x, y);
  return out + "</svg>\n";
}

std::string render(const StackedBars& c) {
  const size_t n = c.x.size();
  double top = 0;
  for (size_t i = 0; i < n; i++) {
    double sum = 0;
    for (const auto& v : c.values) sum += std::max(0.0, v[i]);
    top = std::max(top, sum);
  }
  const Axis y{0, top > 0 ? top * 1.06 : 1, kH - kBottom, kTop};
  // One slot per bar; the x mapping is by index, its labels are the steps.
  const Axis x{-0.5, (double)n - 0.5, kLeft, kW - kRight};
  std::string out = svg_open(c.id, x, y, "stacked") + heading(c.title, c.categories, c.colors) + y_grid(x, y);
  const double w = std::max(1.0, (x.p1 - x.p0) / std::max<size_t>(n, 1) * 0.8);
  const size_t label_every = std::max<size_t>(1, n / 8);
  for (size_t i = 0; i < n; i++) {
    double base = 0;
    for (size_t k = 0; k < c.values.size(); k++) {
      const double v = std::max(0.0, c.values[k][i]);
      // A part too small to show keeps a sliver (0.01 px, the coordinates'
      // resolution), so the rect drawn for it is never empty.
      const double h = std::max(0.01, y.map(base) - y.map(base + v));
      if (v > 0)
        out += "<rect class=\"bar\" data-category=\"" + html_escape(c.categories[k]) + "\" data-x=\"" +
               fmt("%.17g", c.x[i]) + "\" x=\"" + px(x.map((double)i) - w / 2) + "\" y=\"" + px(y.map(base) - h) +
               "\" width=\"" + px(w) + "\" height=\"" + px(h) + "\" fill=\"" + c.colors[k] + "\"/>";
      base += v;
    }
    if (i % label_every == 0 || i + 1 == n)
      out += text(x.map((double)i), y.p0 + 15, format_number(c.x[i]), "text-anchor=\"middle\" class=\"tick\"");
    out += "\n";
  }
  out += text((x.p0 + x.p1) / 2, kH - 8, "step", "text-anchor=\"middle\" class=\"axis\"");
  out += text(14, (y.p0 + y.p1) / 2, c.y_label,
              "text-anchor=\"middle\" class=\"axis\" transform=\"rotate(-90 14 " + px((y.p0 + y.p1) / 2) + ")\"");
  return out + "</svg>\n";
}

std::string render(const GroupedBars& c) {
  double top = 0;
  for (const auto& v : c.values)
    for (double a : v)
      if (std::isfinite(a)) top = std::max(top, a);
  const Axis x{0, top > 0 ? top * 1.12 : 1, kLeft + 30, kW - kRight - 40};
  const size_t rows = c.groups.size(), per = c.names.size();
  const Axis y{0, (double)rows, kH - kBottom, kTop};
  std::string out = svg_open(c.id, x, y, "grouped") + heading(c.title, c.names, c.colors);
  for (double t : nice_ticks(x.v0, x.v1, 6)) {
    const double p = x.map(t);
    out += "<line class=\"grid\" x1=\"" + px(p) + "\" x2=\"" + px(p) + "\" y1=\"" + px(y.p1) + "\" y2=\"" + px(y.p0) + "\"/>";
    out += text(p, y.p0 + 15, format_number(t), "text-anchor=\"middle\" class=\"tick\"");
  }
  const double row_h = (y.p0 - y.p1) / std::max<size_t>(rows, 1), bar_h = row_h * 0.8 / std::max<size_t>(per, 1);
  for (size_t g = 0; g < rows; g++) {
    const double top_px = y.p1 + row_h * (double)g + row_h * 0.1;
    out += text(x.p0 - 6, top_px + row_h * 0.45, c.groups[g], "text-anchor=\"end\" class=\"tick\"");
    for (size_t k = 0; k < per; k++) {
      const double v = c.values[k][g];
      if (!std::isfinite(v)) continue;
      const double yy = top_px + bar_h * (double)k;
      out += "<rect class=\"bar\" data-category=\"" + html_escape(c.groups[g]) + "\" data-series=\"" +
             html_escape(c.names[k]) + "\" data-value=\"" + fmt("%.17g", v) + "\" x=\"" + px(x.p0) + "\" y=\"" +
             px(yy) + "\" width=\"" + px(std::max(0.5, x.map(v) - x.p0)) + "\" height=\"" + px(bar_h * 0.9) +
             "\" fill=\"" + c.colors[k] + "\"/>";
      out += text(x.map(v) + 4, yy + bar_h * 0.75, format_number(v), "class=\"tick\"");
    }
    out += "\n";
  }
  out += text((x.p0 + x.p1) / 2, kH - 8, c.x_label, "text-anchor=\"middle\" class=\"axis\"");
  return out + "</svg>\n";
}

}  // namespace trainer
