#pragma once
// A small SVG writer for the plots `squall report` draws (docs/training.md, "Reports"): one
// line chart per file with axes, ticks, tick labels, axis labels, a title, one polyline per
// series (optionally dashed, with a circle at each point) and a legend below the plot area,
// outside it: the plot area keeps its size however many series and however long their labels.
// The output is a standalone SVG 1.1 document (xmlns set, no scripts, no external references).
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
  int width = 800, height = 600;  // the plot, axes and labels; the legend adds its rows below
  std::vector<PlotSeries> series;
};

// Margins of the plot area inside width x height: room for the tick labels and axis labels.
inline constexpr double k_plot_left = 80, k_plot_right = 20, k_plot_top = 50, k_plot_bottom = 60;

// Where render_line_plot puts the plot area and the legend (pixels, y down), and the document's
// size: the plot area is the plot's width and height less the margins; the legend's box
// starts below it at `height`, as many columns of equal width as fit the plot area's width
// (at least one), a row of 20 px per line; a label too long for the plot's width widens
// the document instead.
struct LegendLayout {
  double plot_x = 0, plot_y = 0, plot_w = 0, plot_h = 0;
  double x = 0, y = 0, w = 0, h = 0;  // the legend's box (0 x 0 without series)
  int columns = 0, rows = 0;
  double column_w = 0;
  double width = 0, height = 0;       // the document
};
LegendLayout legend_layout(const LinePlot& plot);

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
