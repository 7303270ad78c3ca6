#include "io/pictures/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "src/core/error.hpp"

namespace squall::pictures {
namespace {

// Colour-blind-safe palette (Okabe-Ito), black last.
const char* const k_colors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f", v);
  std::string s = b;
  // trim trailing zeros: shorter files, same picture
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string tick_label(double v, double step) {
  char b[32];
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) {
    std::snprintf(b, sizeof(b), "%.3g", v);
  } else {
    int decimals = 0;
    if (step > 0 && step < 1) decimals = std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
    std::snprintf(b, sizeof(b), "%.*f", decimals, v);
  }
  return b;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::ceil(lo / step - 1e-9);
  for (int k = 0;; ++k) {
    const double t = (first + k) * step;
    if (t > hi + step * 1e-9 || k > 1000) break;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

LegendLayout legend_layout(const LinePlot& plot) {
  LegendLayout l;
  l.plot_x = k_plot_left;
  l.plot_y = k_plot_top;
  l.plot_w = plot.width - k_plot_left - k_plot_right;
  l.plot_h = plot.height - k_plot_top - k_plot_bottom;
  l.width = plot.width;
  l.height = plot.height;
  if (plot.series.empty()) return l;
  // Below the plot area and its axis label, in columns as wide as the longest label (12 px
  // text: about 7.2 px a character, after a 36 px sample of the line).
  size_t longest = 0;
  for (const PlotSeries& s : plot.series) longest = std::max(longest, s.label.size());
  const double column = 44 + 7.2 * static_cast<double>(longest);
  const int n = static_cast<int>(plot.series.size());
  l.columns = std::clamp(static_cast<int>(l.plot_w / column), 1, n);
  l.rows = (n + l.columns - 1) / l.columns;
  l.column_w = column;
  l.x = l.plot_x;
  l.y = plot.height;
  l.w = column * l.columns;
  l.h = 8 + 20.0 * l.rows;
  // A label longer than the plot is wide widens the picture rather than being cut.
  l.width = std::max<double>(plot.width, l.x + l.w + k_plot_right);
  l.height = plot.height + l.h + 10;
  return l;
}

std::string render_line_plot(const LinePlot& plot) {
  // The plot area keeps the size the plot asks for; the legend goes below it, never over the
  // data nor shrinking it however long the labels are.
  const LegendLayout layout = legend_layout(plot);
  const double W = layout.width, H = layout.height;
  const double left = layout.plot_x, top = layout.plot_y;
  const double pw = layout.plot_w, ph = layout.plot_h;

  auto fx = [&](double x) { return plot.log2_x ? std::log2(x) : x; };
  auto usable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!plot.log2_x || x > 0); };

  // Data range.
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const PlotSeries& s : plot.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      x0 = std::min(x0, fx(s.x[i]));
      x1 = std::max(x1, fx(s.x[i]));
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;  // no data: an empty frame
  if (plot.x_min) x0 = fx(*plot.x_min);
  if (plot.x_max) x1 = fx(*plot.x_max);
  if (plot.y_min) y0 = *plot.y_min;
  if (plot.y_max) y1 = *plot.y_max;
  if (x1 <= x0) x0 -= 0.5, x1 += 0.5;
  if (y1 <= y0) {
    const double pad = y0 == 0 ? 1 : std::abs(y0) * 0.1;
    y0 -= pad, y1 += pad;
  } else if (!plot.y_min && !plot.y_max) {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  if (!plot.log2_x && !plot.x_min && !plot.x_max) {  // a little room around the points
    const double pad = (x1 - x0) * 0.03;
    x0 -= pad, x1 += pad;
  }
  if (plot.log2_x && !plot.x_min && !plot.x_max) x0 -= 0.25, x1 += 0.25;

  auto px = [&](double xv) { return left + (fx(xv) - x0) / (x1 - x0) * pw; };  // xv in data units
  auto pxl = [&](double xs) { return left + (xs - x0) / (x1 - x0) * pw; };   // xs in scale units
  auto py = [&](double yv) { return top + (1 - (yv - y0) / (y1 - y0)) * ph; };

  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(W) + "\" height=\"" + num(H) +
       "\" viewBox=\"0 0 " + num(W) + " " + num(H) + "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n";
  o += "<title>" + xml_escape(plot.title) + "</title>\n";
  o += "<rect x=\"0\" y=\"0\" width=\"" + num(W) + "\" height=\"" + num(H) + "\" fill=\"#ffffff\"/>\n";
  o += "<text class=\"title\" x=\"" + num(W / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\">" +
       xml_escape(plot.title) + "</text>\n";

  // Grid and ticks.
  o += "<g class=\"grid\" stroke=\"#dddddd\" stroke-width=\"1\">\n";
  std::vector<std::pair<double, std::string>> xt, yt;  // pixel position, label
  if (plot.log2_x) {
    for (int e = static_cast<int>(std::ceil(x0 - 1e-9)); e <= static_cast<int>(std::floor(x1 + 1e-9)); ++e)
      xt.emplace_back(pxl(e), tick_label(std::ldexp(1.0, e), 1));
  } else {
    const auto t = nice_ticks(x0, x1);
    const double step = t.size() > 1 ? t[1] - t[0] : 1;
    for (double v : t) xt.emplace_back(pxl(v), tick_label(v, step));
  }
  {
    const auto t = nice_ticks(y0, y1);
    const double step = t.size() > 1 ? t[1] - t[0] : 1;
    for (double v : t) yt.emplace_back(py(v), tick_label(v, step));
  }
  for (const auto& [p, _] : xt)
    o += "<line x1=\"" + num(p) + "\" y1=\"" + num(top) + "\" x2=\"" + num(p) + "\" y2=\"" + num(top + ph) + "\"/>\n";
  for (const auto& [p, _] : yt)
    o += "<line x1=\"" + num(left) + "\" y1=\"" + num(p) + "\" x2=\"" + num(left + pw) + "\" y2=\"" + num(p) + "\"/>\n";
  o += "</g>\n";

  // Axes.
  o += "<g class=\"axes\" stroke=\"#000000\" stroke-width=\"1.5\">\n";
  o += "<line class=\"x-axis\" x1=\"" + num(left) + "\" y1=\"" + num(top + ph) + "\" x2=\"" + num(left + pw) +
       "\" y2=\"" + num(top + ph) + "\"/>\n";
  o += "<line class=\"y-axis\" x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" +
       num(top + ph) + "\"/>\n";
  for (const auto& [p, _] : xt)
    o += "<line x1=\"" + num(p) + "\" y1=\"" + num(top + ph) + "\" x2=\"" + num(p) + "\" y2=\"" + num(top + ph + 5) + "\"/>\n";
  for (const auto& [p, _] : yt)
    o += "<line x1=\"" + num(left - 5) + "\" y1=\"" + num(p) + "\" x2=\"" + num(left) + "\" y2=\"" + num(p) + "\"/>\n";
  o += "</g>\n";
  o += "<g class=\"tick-labels\" font-size=\"12\" fill=\"#000000\">\n";
  for (const auto& [p, label] : xt)
    o += "<text x=\"" + num(p) + "\" y=\"" + num(top + ph + 20) + "\" text-anchor=\"middle\">" + xml_escape(label) +
         "</text>\n";
  for (const auto& [p, label] : yt)
    o += "<text x=\"" + num(left - 8) + "\" y=\"" + num(p + 4) + "\" text-anchor=\"end\">" + xml_escape(label) +
         "</text>\n";
  o += "</g>\n";
  o += "<text class=\"x-label\" x=\"" + num(left + pw / 2) + "\" y=\"" + num(top + ph + k_plot_bottom - 15) +
       "\" text-anchor=\"middle\" font-size=\"14\">" + xml_escape(plot.x_label) + "</text>\n";
  o += "<text class=\"y-label\" x=\"18\" y=\"" + num(top + ph / 2) + "\" text-anchor=\"middle\" font-size=\"14\" " +
       "transform=\"rotate(-90 18 " + num(top + ph / 2) + ")\">" + xml_escape(plot.y_label) + "</text>\n";

  // Series, clipped to the plot area.
  o += "<defs><clipPath id=\"plot-area\"><rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) +
       "\" height=\"" + num(ph) + "\"/></clipPath></defs>\n";
  o += "<g class=\"series\" clip-path=\"url(#plot-area)\">\n";
  for (size_t k = 0; k < plot.series.size(); ++k) {
    const PlotSeries& s = plot.series[k];
    const std::string color = k_colors[k % (sizeof(k_colors) / sizeof(k_colors[0]))];
    std::string points;
    std::string marks;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      const std::string p = num(px(s.x[i])) + "," + num(py(s.y[i]));
      points += (points.empty() ? "" : " ") + p;
      if (s.markers)
        marks += "<circle cx=\"" + num(px(s.x[i])) + "\" cy=\"" + num(py(s.y[i])) + "\" r=\"3.5\" fill=\"" + color +
                 "\"/>\n";
    }
    o += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"" +
         (s.dashed ? " stroke-dasharray=\"6,4\"" : "") + " points=\"" + points + "\"><title>" + xml_escape(s.label) +
         "</title></polyline>\n";
    o += marks;
  }
  o += "</g>\n";

  // Legend, below the plot area: series k in row k / columns, column k % columns.
  if (!plot.series.empty()) {
    const double lx = layout.x, ly = layout.y;
    o += "<g class=\"legend\" font-size=\"12\">\n";
    o += "<rect class=\"legend-box\" x=\"" + num(lx) + "\" y=\"" + num(ly) + "\" width=\"" + num(layout.w) +
         "\" height=\"" + num(layout.h) + "\" fill=\"#ffffff\" stroke=\"#999999\"/>\n";
    for (size_t k = 0; k < plot.series.size(); ++k) {
      const std::string color = k_colors[k % (sizeof(k_colors) / sizeof(k_colors[0]))];
      const double x = lx + layout.column_w * static_cast<double>(static_cast<int>(k) % layout.columns);
      const double y = ly + 16 + 20 * static_cast<double>(static_cast<int>(k) / layout.columns);
      o += "<line x1=\"" + num(x + 8) + "\" y1=\"" + num(y - 4) + "\" x2=\"" + num(x + 30) + "\" y2=\"" +
           num(y - 4) + "\" stroke=\"" + color + "\" stroke-width=\"2\"" +
           (plot.series[k].dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
      o += "<text x=\"" + num(x + 36) + "\" y=\"" + num(y) + "\">" + xml_escape(plot.series[k].label) + "</text>\n";
    }
    o += "</g>\n";
  }
  o += "</svg>\n";
  return o;
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write " + path);
    out << text;
    out.flush();
    if (!out) throw Error("cannot write " + path + " (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot write " + path + ": " + ec.message());
}

}  // namespace squall::pictures
