#pragma once
// A small SVG writer for the plots `squall report` draws (docs/training.md, "Reports"): one
// line chart per file with axes, ticks, tick labels, axis labels, a title, one polyline per
// series (optionally dashed, with a circle at each point) and a legend right of the plot area. The output is a
// standalone SVG 1.1 document (xmlns set, no scripts, no external references).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace squall::pictures {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // same length; points with a non-finite coordinate are left out
  bool dashed = false;
  bool markers = true;       // a circle at each point
};

struct LinePlot {
  std::string title, x_label, y_label;
  bool log2_x = false;             // x on a log2 scale, ticks at powers of 2 (x must be > 0)
  std::optional<double> y_min, y_max;  // fixed y range; otherwise from the data
  std::optional<double> x_min, x_max;  // fixed x range; otherwise from the data
  int width = 800, height = 600;
  std::vector<PlotSeries> series;
};

// "<" ">" "&" and quotes escaped for text and attribute values.
std::string xml_escape(std::string_view text);

// Round tick positions covering [lo, hi]: steps of 1, 2 or 5 times a power of ten, about
// `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// The SVG document.
std::string render_line_plot(const LinePlot& plot);

// Written to `path`.tmp and renamed; throws squall::Error naming the path.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace squall::pictures
