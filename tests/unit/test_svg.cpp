// The SVG writer (io/pictures/svg.hpp) behind `squall report`'s plots: well-formed XML with the svg
// namespace, axes, ticks, one polyline per series with every finite point, a legend, escaped text.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "io/pictures/svg.hpp"
#include "tests/support/xml_check.hpp"

using namespace squall;
using squall::test::check_xml;
using squall::test::polyline_point_count;

namespace {

pictures::LinePlot two_series() {
  pictures::LinePlot p;
  p.title = "Throughput <samples/s> & scaling";
  p.x_label = "ranks";
  p.y_label = "samples/s";
  p.log2_x = true;
  p.series.push_back({"measured", {1, 2, 4}, {1000, 1900, 3500}, false, true});
  p.series.push_back({"ideal", {1, 2, 4}, {1000, 2000, 4000}, true, false});
  return p;
}

}  // namespace

TEST_CASE("svg: a line plot is well-formed XML with the svg namespace", "[svg]") {
  const std::string svg = pictures::render_line_plot(two_series());
  const auto x = check_xml(svg);
  INFO(x.error << "\n" << svg);
  REQUIRE(x.ok);
  CHECK(x.root == "svg");
  CHECK(x.elements.front().attributes.at("xmlns") == "http://www.w3.org/2000/svg");
  CHECK(x.elements.front().attributes.count("viewBox") == 1);
  CHECK(svg.find("&lt;samples/s&gt; &amp; scaling") != std::string::npos);  // escaped title
}

TEST_CASE("svg: axes, ticks, labels, one polyline per series and a legend", "[svg]") {
  const std::string svg = pictures::render_line_plot(two_series());
  const auto x = check_xml(svg);
  REQUIRE(x.ok);
  int polylines = 0, axes = 0;
  std::vector<int> points;
  bool dashed = false;
  for (const auto& e : x.elements) {
    if (e.name == "polyline") {
      ++polylines;
      points.push_back(polyline_point_count(e.attributes.at("points")));
      dashed |= e.attributes.count("stroke-dasharray") == 1;
    }
    if (e.name == "line" && e.attributes.count("class") &&
        (e.attributes.at("class") == "x-axis" || e.attributes.at("class") == "y-axis"))
      ++axes;
  }
  CHECK(polylines == 2);
  CHECK(points == std::vector<int>{3, 3});
  CHECK(dashed);
  CHECK(axes == 2);
  CHECK(x.count("circle") == 3);  // markers on the measured series only
  // log2 x axis: ticks at 1, 2 and 4
  for (const char* t : {">1</text>", ">2</text>", ">4</text>"}) CHECK(svg.find(t) != std::string::npos);
  CHECK(svg.find(">ranks</text>") != std::string::npos);
  CHECK(svg.find(">samples/s</text>") != std::string::npos);
  CHECK(svg.find("class=\"legend\"") != std::string::npos);
  CHECK(svg.find(">measured</text>") != std::string::npos);
  CHECK(svg.find(">ideal</text>") != std::string::npos);
}

TEST_CASE("svg: non-finite points are left out, an empty plot is still a valid frame", "[svg]") {
  pictures::LinePlot p;
  p.title = "loss";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  p.series.push_back({"run", {0, 1, 2, 3}, {2.0, nan, 1.0, std::numeric_limits<double>::infinity()}, false, false});
  auto x = check_xml(pictures::render_line_plot(p));
  REQUIRE(x.ok);
  for (const auto& e : x.elements)
    if (e.name == "polyline") CHECK(polyline_point_count(e.attributes.at("points")) == 2);

  pictures::LinePlot empty;
  empty.title = "nothing";
  x = check_xml(pictures::render_line_plot(empty));
  CHECK(x.ok);
  CHECK(x.count("polyline") == 0);
}

TEST_CASE("svg: a fixed y range and nice ticks", "[svg]") {
  const auto u = pictures::nice_ticks(0, 1.1, 6);
  REQUIRE(u.size() == 6);
  for (size_t k = 0; k < u.size(); ++k) CHECK(u[k] == Approx(0.2 * static_cast<double>(k)));
  const auto t = pictures::nice_ticks(0, 1000, 5);
  CHECK(t.front() == 0);
  CHECK(t.back() == 1000);
  pictures::LinePlot p;
  p.title = "efficiency";
  p.y_min = 0;
  p.y_max = 1.1;
  p.series.push_back({"run", {1, 2}, {1.0, 0.9}, false, true});
  const std::string svg = pictures::render_line_plot(p);
  CHECK(check_xml(svg).ok);
  CHECK(svg.find(">1.0</text>") != std::string::npos);
  CHECK(svg.find(">0.0</text>") != std::string::npos);
}

TEST_CASE("svg: the XML check itself rejects broken documents", "[svg]") {
  CHECK_FALSE(check_xml("<svg><g></svg>").ok);
  CHECK_FALSE(check_xml("<svg a=1/>").ok);
  CHECK_FALSE(check_xml("<svg a=\"1\" a=\"2\"/>").ok);
  CHECK_FALSE(check_xml("<svg>a & b</svg>").ok);
  CHECK_FALSE(check_xml("<svg/><svg/>").ok);
  CHECK(check_xml("<?xml version=\"1.0\"?>\n<svg><g x=\"&amp;\"/></svg>\n").ok);
}

TEST_CASE("svg: the legend goes below the plot area in columns, and long labels widen the picture, never shrink the plot",
          "[svg]") {
  pictures::LinePlot p = two_series();
  const pictures::LegendLayout two = pictures::legend_layout(p);
  CHECK(two.plot_w == 700);
  CHECK(two.plot_h == 490);
  CHECK(two.y >= two.plot_y + two.plot_h);  // below the plot area and its axis label
  CHECK(two.columns == 2);                  // short labels: side by side
  CHECK(two.rows == 1);
  CHECK(two.width == 800);
  CHECK(two.height == Approx(600 + two.h + 10));
  // Nine series, one of them named by 150 characters: one column, nine rows, the plot area as
  // before, the document wider than 800 so that the label is not cut.
  for (int k = 0; k < 6; ++k) p.series.push_back({"run " + std::to_string(k), {1, 2}, {1, 2}, false, true});
  p.series.push_back({std::string(150, 'x'), {1}, {1}, false, true});
  const pictures::LegendLayout many = pictures::legend_layout(p);
  CHECK(many.plot_w == 700);
  CHECK(many.plot_h == 490);
  CHECK(many.columns == 1);
  CHECK(many.rows == 9);
  CHECK(many.width >= many.x + 36 + 7.2 * 150);
  const std::string svg = pictures::render_line_plot(p);
  const auto x = check_xml(svg);
  REQUIRE(x.ok);
  CHECK(x.elements.front().attributes.at("width") == std::to_string(static_cast<int>(std::lround(many.width))));
}
