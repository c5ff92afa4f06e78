// A small SVG writer for line charts, so that amber draws its own plots without a
// plotting library: a grid of panels, each with a frame, ticked axes, a grid and its
// line series, and one legend for the figure. It knows nothing of training runs.
#pragma once

#include <string>
#include <vector>

namespace amber {

struct ChartSeries {
  std::vector<double> x, y;  // points in order of x; non-finite ones are left out
  int color = 0;             // index into the palette, which repeats after ten
  bool dashed = false;
};

struct ChartPanel {
  std::string title;
  std::string x_label;
  std::vector<ChartSeries> series;
};

struct LegendEntry {
  std::string label;
  int color = 0;
  bool dashed = false;
};

struct Chart {
  std::string title;
  std::vector<ChartPanel> panels;
  std::vector<LegendEntry> legend;
  int columns = 2;
};

// A standalone SVG document (UTF-8). A panel without points says so in its frame.
std::string chart_to_svg(const Chart& chart);

// Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi], about
// `target` of them; lo < hi.
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace amber
