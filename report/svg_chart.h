#pragma once
// Charts as inline SVG text for the run report: line charts (with vertical
// event markers), stacked bars and grouped horizontal bars. No scripts, no
// fonts from the network: the page opens from a file anywhere.
//
// Every chart's <svg> carries its axis mapping as data attributes
// (data-x0/x1/y0/y1: the data range; data-px0/px1/py0/py1: where it lands,
// py0 at the bottom) and every series path its name (data-series), so a
// test can read the plotted values back from the drawn coordinates.
#include <string>
#include <vector>

namespace trainer {

struct Series {
  std::string name, color;
  std::vector<double> x, y;  // NaN y: a gap in the line
  bool dots = false;          // a dot at every point (sparse series: validation)
};

// A vertical line at x: an event on a time axis.
struct Marker {
  double x = 0;
  std::string kind, label, color, detail;  // detail: the tooltip
};

enum class AxisFormat { Number, Tokens, Duration };

struct LineChart {
  std::string id, title, x_label, y_label;
  AxisFormat x_format = AxisFormat::Number;
  std::vector<Series> series;
  std::vector<Marker> markers;
  bool y_from_zero = false;
};

struct StackedBars {
  std::string id, title, y_label;
  std::vector<std::string> categories, colors;  // bottom to top
  std::vector<double> x;                        // one bar per x (step)
  std::vector<std::vector<double>> values;      // [category][bar]
};

struct GroupedBars {
  std::string id, title, x_label;
  std::vector<std::string> groups;         // rows (memory categories)
  std::vector<std::string> names, colors;  // bars within a row (measured, plan)
  std::vector<std::vector<double>> values;  // [name][group]
};

std::string render(const LineChart& c);
std::string render(const StackedBars& c);
std::string render(const GroupedBars& c);

std::string html_escape(const std::string& s);

// At most `limit` points of a long series: every k-th and the last, so the
// page stays small for a run of a million steps.
void thin(Series& s, size_t limit);

}  // namespace trainer
