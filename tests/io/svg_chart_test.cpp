// The SVG chart writer: round ticks, escaped text, and panels that say when they are empty.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "amber/io/svg_chart.h"

namespace amber {
namespace {

TEST(SvgChart, TicksAreRoundMultiplesCoveringTheRange) {
  EXPECT_EQ(nice_ticks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(nice_ticks(-0.3, 7.1, 6), (std::vector<double>{0, 2, 4, 6}));
  EXPECT_EQ(nice_ticks(98000, 151000, 5), (std::vector<double>{100000, 120000, 140000}));
  for (double t : nice_ticks(-5, 5, 4)) EXPECT_FALSE(t == 0 && std::signbit(t)) << "no -0 tick";
}

TEST(SvgChart, TextIsEscapedAndEmptyPanelsSaySo) {
  Chart chart{"a <b> & 'c'",
              {{"loss", "step", {{{1, 2, 3}, {-1.0, 0.0, 2.5}, 0, false}}}, {"mfu", "step", {{{}, {}, 1, false}}}},
              {{"run \"x\"", 0, false}},
              2};
  const std::string svg = chart_to_svg(chart);
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; &apos;c&apos;"), std::string::npos);
  EXPECT_NE(svg.find("run &quot;x&quot;"), std::string::npos);
  EXPECT_NE(svg.find("no data in these runs"), std::string::npos);
  EXPECT_EQ(svg.find(">-0<"), std::string::npos) << "a zero tick reads 0";
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

}  // namespace
}  // namespace amber
