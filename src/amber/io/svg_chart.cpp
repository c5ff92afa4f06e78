#include "amber/io/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace amber {
namespace {

// Tableau's ten colours: distinct for the first runs, readable on white.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

constexpr double kPanelWidth = 560, kPanelHeight = 290;
constexpr double kLeft = 74, kRight = 18, kTop = 30, kBottom = 46;  // the plot area's margins in a panel
constexpr double kHeader = 44, kLegendLine = 22;

const char* color(int index) { return kPalette[static_cast<size_t>(index) % std::size(kPalette)]; }

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  bool empty() const { return lo > hi; }
  // A range of one value gets a width, so that its ticks and points have somewhere to go.
  void widen(double fraction) {
    const double pad = hi > lo ? (hi - lo) * fraction : std::max(std::abs(lo) * 0.05, 1e-12);
    lo -= pad, hi += pad;
  }
};

// Labels for one axis's ticks, alike in form: 12.5k and 1.2M for large values, 3.0e-04
// for small ones, else as many decimals as the tick spacing needs.
std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  double largest = 0;
  for (double t : ticks) largest = std::max(largest, std::abs(t));
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : std::max(largest, 1.0);
  std::vector<std::string> labels;
  for (double t : ticks) {
    std::ostringstream out;
    if (largest >= 1e4) {
      const double scale = largest >= 1e9 ? 1e9 : largest >= 1e6 ? 1e6 : 1e3;
      const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step / scale) - 1e-9)));
      out << std::fixed << std::setprecision(decimals) << t / scale << (scale == 1e9 ? "G" : scale == 1e6 ? "M" : "k");
    } else if (largest < 1e-2 && t != 0) {
      out << std::scientific << std::setprecision(1) << t;
    } else {
      const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
      out << std::fixed << std::setprecision(decimals) << t;
    }
    labels.push_back(out.str());
  }
  return labels;
}

// The points of a series in plot coordinates. Past a few points per pixel column only
// each column's lowest and highest points are kept (in their order), so a long run
// draws as fast as a short one and its spikes stay visible.
std::vector<std::pair<double, double>> screen_points(const ChartSeries& s, double plot_width, auto&& sx, auto&& sy) {
  std::vector<std::pair<double, double>> all;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) all.emplace_back(sx(s.x[i]), sy(s.y[i]));
  if (all.size() <= static_cast<size_t>(4 * plot_width)) return all;
  std::vector<std::pair<double, double>> kept;
  size_t begin = 0;
  while (begin < all.size()) {
    size_t end = begin, low = begin, high = begin;
    for (; end < all.size() && std::floor(all[end].first) == std::floor(all[begin].first); ++end) {
      if (all[end].second > all[low].second) low = end;  // screen y grows downwards
      if (all[end].second < all[high].second) high = end;
    }
    kept.push_back(all[std::min(low, high)]);
    if (low != high) kept.push_back(all[std::max(low, high)]);
    begin = end;
  }
  return kept;
}

void write_panel(std::ostream& out, const ChartPanel& panel, int index, double left, double top) {
  const double width = kPanelWidth - kLeft - kRight, height = kPanelHeight - kTop - kBottom;
  const double x0 = left + kLeft, y0 = top + kTop;
  out << "<g class=\"panel\">\n"
      << "<text x=\"" << x0 << "\" y=\"" << top + 20 << "\" class=\"title\">" << escape(panel.title) << "</text>\n"
      << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << width << "\" height=\"" << height
      << "\" class=\"frame\"/>\n";
  Range xr, yr;
  for (const ChartSeries& s : panel.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) xr.add(s.x[i]), yr.add(s.y[i]);
  if (xr.empty()) {
    out << "<text x=\"" << x0 + width / 2 << "\" y=\"" << y0 + height / 2
        << "\" class=\"empty\">no data in these runs</text>\n</g>\n";
    return;
  }
  if (xr.hi == xr.lo) xr.widen(0);
  yr.widen(0.05);
  const auto sx = [&](double x) { return x0 + (x - xr.lo) / (xr.hi - xr.lo) * width; };
  const auto sy = [&](double y) { return y0 + height - (y - yr.lo) / (yr.hi - yr.lo) * height; };
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, 6), yt = nice_ticks(yr.lo, yr.hi, 5);
  const std::vector<std::string> xl = tick_labels(xt), yl = tick_labels(yt);
  for (size_t i = 0; i < xt.size(); ++i)
    out << "<line x1=\"" << sx(xt[i]) << "\" y1=\"" << y0 << "\" x2=\"" << sx(xt[i]) << "\" y2=\"" << y0 + height
        << "\" class=\"grid\"/><text x=\"" << sx(xt[i]) << "\" y=\"" << y0 + height + 16 << "\" class=\"xtick\">"
        << xl[i] << "</text>\n";
  for (size_t i = 0; i < yt.size(); ++i)
    out << "<line x1=\"" << x0 << "\" y1=\"" << sy(yt[i]) << "\" x2=\"" << x0 + width << "\" y2=\"" << sy(yt[i])
        << "\" class=\"grid\"/><text x=\"" << x0 - 6 << "\" y=\"" << sy(yt[i]) + 4 << "\" class=\"ytick\">"
        << yl[i] << "</text>\n";
  out << "<text x=\"" << x0 + width / 2 << "\" y=\"" << y0 + height + 36 << "\" class=\"xlabel\">"
      << escape(panel.x_label) << "</text>\n"
      << "<clipPath id=\"plot" << index << "\"><rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << width
      << "\" height=\"" << height << "\"/></clipPath>\n<g clip-path=\"url(#plot" << index << ")\">\n";
  for (const ChartSeries& s : panel.series) {
    const auto points = screen_points(s, width, sx, sy);
    if (points.empty()) continue;
    // One point alone draws as a dot; a line needs two.
    if (points.size() == 1) {
      out << "<circle cx=\"" << points[0].first << "\" cy=\"" << points[0].second << "\" r=\"2.5\" fill=\""
          << color(s.color) << "\"/>\n";
      continue;
    }
    out << "<polyline fill=\"none\" stroke=\"" << color(s.color) << "\" stroke-width=\"1.5\""
        << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
    for (const auto& [x, y] : points) out << x << "," << y << " ";
    out << "\"/>\n";
  }
  out << "</g>\n</g>\n";
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * power;
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  // Multiples of the step, not a running sum, so that 0.1 + 0.2 never shows as 0.30000000000000004.
  // Adding 0.0 turns -0.0 into 0, which would print as "-0".
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; ++k) ticks.push_back(k * step + 0.0);
  return ticks;
}

std::string chart_to_svg(const Chart& chart) {
  const int columns = std::max(1, chart.columns);
  const int panels = static_cast<int>(chart.panels.size());
  const int rows = (panels + columns - 1) / columns;
  const double width = columns * kPanelWidth + 20;
  // The legend takes the grid's first free cell where it fits there, else a band below.
  const bool in_cell = panels % columns != 0 && static_cast<double>(chart.legend.size()) * kLegendLine <=
                                                    kPanelHeight - kTop - kBottom;
  const double legend_left = 10 + (in_cell ? (panels % columns) * kPanelWidth : 0) + kLeft;
  const double legend_top = in_cell ? kHeader + (rows - 1) * kPanelHeight + kTop : kHeader + rows * kPanelHeight + 10;
  const double height = kHeader + rows * kPanelHeight + 16 +
                        (in_cell ? 0 : static_cast<double>(chart.legend.size()) * kLegendLine + 10);
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<style>.title{font-size:14px;font-weight:bold}.frame{fill:none;stroke:#444}"
      << ".grid{stroke:#e4e4e4}.xtick,.xlabel,.empty{text-anchor:middle}.ytick{text-anchor:end}"
      << ".empty{fill:#888}</style>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << 10 + kLeft << "\" y=\"28\" font-size=\"16\">" << escape(chart.title) << "</text>\n";
  for (size_t i = 0; i < chart.panels.size(); ++i) {
    const double left = 10 + static_cast<double>(static_cast<int>(i) % columns) * kPanelWidth;
    const double top = kHeader + static_cast<double>(static_cast<int>(i) / columns) * kPanelHeight;
    write_panel(out, chart.panels[i], static_cast<int>(i), left, top);
  }
  out << "<g class=\"legend\">\n";
  for (size_t i = 0; i < chart.legend.size(); ++i) {
    const LegendEntry& e = chart.legend[i];
    const double y = legend_top + static_cast<double>(i) * kLegendLine + 12;
    out << "<line x1=\"" << legend_left << "\" y1=\"" << y - 4 << "\" x2=\"" << legend_left + 28 << "\" y2=\""
        << y - 4 << "\" stroke=\"" << color(e.color) << "\" stroke-width=\"2\""
        << (e.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/><text x=\"" << legend_left + 36 << "\" y=\"" << y
        << "\">" << escape(e.label) << "</text>\n";
  }
  out << "</g>\n</svg>\n";
  return out.str();
}

}  // namespace amber
