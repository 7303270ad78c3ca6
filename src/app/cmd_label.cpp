// `squall data label --in DIR --out DIR [thresholds] [--json]`: recomputes the labels of
// DeepCAM-layout files (`data-*.h5`) with TECA-style heuristics (src/data/climate_label.hpp,
// docs/data.md) and writes each file, with /climate/labels_0 replaced, to --out; stats.h5 is
// copied too. Each output file is written to a temporary name and renamed, so a file in
// --out is whole or absent. A folder of netCDF files (*.nc, io/formats/netcdf_file.hpp) is labelled
// time step by time step; each step becomes a DeepCAM-layout file
// `data-<file stem>-tNNNNNN.h5` (fields, lat/lon and labels), so that the output trains as
// DeepCAM data does.
//
// Under mpirun, file i goes to rank i % size. A failure on any rank makes every rank exit 1
// after one line from rank 0 naming the rank and the file (the ranks agree on the outcome
// through mpi::run_agreed, as `squall stage` does).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/formats/deepcam_file.hpp"
#include "io/formats/netcdf_file.hpp"
#include "mpi/comm.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/data/climate_label.hpp"

namespace squall::app {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct LabelArgs {
  std::string in, out;
  std::string netcdf_variables;  // "CHANNEL=variable, ..." (netCDF input)
  data::LabelParams params;
  bool json = false;
};

// One unit of work: a DeepCAM file (step -1), or one time step of a netCDF file.
struct Item {
  fs::path file;
  int64_t step = -1;
};

// The data-*.h5 files of `dir` in name order; without any, the time steps of its *.nc files.
std::vector<Item> input_items(const std::string& dir, const formats::NetcdfOptions& netcdf) {
  if (!fs::is_directory(dir)) throw UsageError("--in " + dir + ": not a folder");
  std::vector<fs::path> files, nc;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.starts_with("data-") && name.ends_with(".h5")) files.push_back(e.path());
    if (e.is_regular_file() && e.path().extension() == ".nc") nc.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::sort(nc.begin(), nc.end());
  std::vector<Item> items;
  for (const fs::path& f : files) items.push_back({f, -1});
  if (items.empty())
    for (const fs::path& f : nc) {
      const int64_t steps = formats::describe_netcdf(f.string(), netcdf).steps;
      for (int64_t t = 0; t < steps; ++t) items.push_back({f, t});
    }
  if (items.empty()) throw UsageError("--in " + dir + ": no DeepCAM files (data-*.h5) and no netCDF files (*.nc)");
  return items;
}

// A netCDF time step as a DeepCAM sample: channels last. Its rows already run south to north,
// as the labeler's grid does: the netCDF reader flips a file whose latitude descends.
formats::DeepcamFields netcdf_fields(const formats::NetcdfSample& s, std::vector<double>& lat) {
  formats::DeepcamFields f{s.h, s.w, s.c, std::vector<float>(s.chw.size())};
  lat = s.grid.lat;
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t y = 0; y < s.h; ++y)
      for (int64_t x = 0; x < s.w; ++x)
        f.hwc[static_cast<size_t>((y * s.w + x) * s.c + c)] = s.chw[static_cast<size_t>((c * s.h + y) * s.w + x)];
  return f;
}

void check_folders(const LabelArgs& a) {
  std::error_code ec;
  const fs::path in = fs::weakly_canonical(a.in, ec), out = fs::weakly_canonical(a.out, ec);
  if (in == out || (fs::exists(a.out) && fs::equivalent(a.in, a.out, ec)))
    throw UsageError("--out " + a.out + " is the --in folder: the labeler never rewrites its input; name another folder");
}

// Copies src to dst through a temporary name (dst is whole or absent).
void copy_atomically(const fs::path& src, const fs::path& dst) {
  const fs::path tmp = dst.string() + ".tmp";
  std::error_code ec;
  fs::copy_file(src, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp, dst, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error(dst.string() + ": cannot copy from " + src.string() + ": " + ec.message());
  }
}

// This rank's share: labels, counts per class and centres per file.
json label_my_files(const LabelArgs& a, const std::vector<Item>& items, const formats::NetcdfOptions& netcdf, int rank,
                    int size) {
  json done = json::array();
  for (size_t k = static_cast<size_t>(rank); k < items.size(); k += static_cast<size_t>(size)) {
    const std::string src = items[k].file.string();
    const bool is_nc = items[k].step >= 0;
    std::vector<double> lat, lon;
    formats::DeepcamFields fields;
    if (is_nc) {
      const formats::NetcdfSample s = formats::read_netcdf_sample(src, items[k].step, netcdf);
      fields = netcdf_fields(s, lat);
      lon = s.grid.lon;
    } else {
      fields = formats::read_deepcam_fields(src);
    }
    if (fields.c != data::k_climate_channels)
      throw Error(src + ": dataset /climate/data has " + std::to_string(fields.c) + " channels, expected " +
                  std::to_string(data::k_climate_channels) + " (TMQ, U850, ..., ZBOT)");
    const data::ClimateFields view{fields.h, fields.w, fields.hwc};
    const std::vector<data::TcCentre> centres = data::find_tc_centres(view, a.params);
    const std::vector<uint8_t> tc = data::tc_mask(view, centres, a.params);
    std::vector<data::ArBlob> blobs;
    const std::vector<uint8_t> ar = data::ar_mask(view, a.params, &blobs);
    std::vector<int32_t> labels(tc.size());
    int64_t counts[3] = {0, 0, 0};
    for (size_t p = 0; p < labels.size(); ++p) {
      labels[p] = tc[p] ? data::k_tropical_cyclone : ar[p] ? data::k_atmospheric_river : data::k_background;
      ++counts[labels[p]];
    }
    fs::path dst = fs::path(a.out) / items[k].file.filename();
    if (is_nc) {
      char step[16];
      std::snprintf(step, sizeof step, "-t%06lld", static_cast<long long>(items[k].step));
      dst = fs::path(a.out) / ("data-" + items[k].file.stem().string() + step + ".h5");
      formats::write_deepcam_file(dst.string(), fields.hwc.data(), fields.h, fields.w, fields.c, labels.data(), lat,
                                  lon);
    } else {
      formats::write_deepcam_relabelled(src, dst.string(), labels);
    }
    const auto rivers = std::count_if(blobs.begin(), blobs.end(), [](const data::ArBlob& b) { return b.kept; });
    done.push_back({{"file", dst.string()}, {"cyclones", centres.size()}, {"rivers", rivers},
                    {"pixels", {counts[0], counts[1], counts[2]}}});
  }
  return done;
}

int run_label(const LabelArgs& a) {
  const mpi::Communicator world = mpi::Communicator::world();
  check_folders(a);
  formats::NetcdfOptions netcdf;  // DeepCAM's 16 channels: the labeler reads them by name
  try {
    netcdf.variables = formats::netcdf_variable_map(a.netcdf_variables);
  } catch (const Error& e) {
    throw UsageError(std::string("--netcdf-variables: ") + e.what());
  }
  const std::vector<Item> files = input_items(a.in, netcdf);

  json mine;
  run_share_agreed(world, "data label", [&] {
    std::error_code ec;
    fs::create_directories(a.out, ec);  // the ranks race here; the check below decides
    if (!fs::is_directory(a.out))
      throw Error("--out " + a.out + ": cannot create the folder" + (ec ? ": " + ec.message() : ""));
    mine = label_my_files(a, files, netcdf, world.rank(), world.size());
    const fs::path stats = fs::path(a.in) / "stats.h5";
    if (world.rank() == 0 && fs::exists(stats)) copy_atomically(stats, fs::path(a.out) / "stats.h5");
  });
  const std::vector<std::string> reports = world.gather_strings(mine.dump(), 0);
  if (world.rank() != 0) return 0;

  json all = json::array();
  int64_t cyclones = 0, rivers = 0;
  for (const std::string& s : reports) {
    for (json& f : json::parse(s)) {
      cyclones += f["cyclones"].get<int64_t>();
      rivers += f["rivers"].get<int64_t>();
      all.push_back(std::move(f));
    }
  }
  std::sort(all.begin(), all.end(),
            [](const json& x, const json& y) { return x["file"].get<std::string>() < y["file"].get<std::string>(); });
  std::ostringstream text;
  for (const json& f : all)
    text << "  " << f["file"].get<std::string>() << ": " << f["cyclones"] << " cyclone(s), " << f["rivers"]
         << " river(s)\n";
  text << "labelled " << all.size() << " file(s) into " << a.out << ": " << cyclones << " cyclone(s), " << rivers
       << " atmospheric river(s)\n";
  print_result(a.json, json{{"files", all}, {"cyclones", cyclones}, {"rivers", rivers}, {"out", a.out}}, text.str());
  return 0;
}

void add_threshold_options(CLI::App& sub, data::LabelParams& p) {
  const auto opt = [&](const char* name, double& value, const char* what) {
    sub.add_option(name, value, what)->capture_default_str()->check(CLI::NonNegativeNumber);
  };
  opt("--tc-vorticity", p.tc_vorticity, "TC: cyclonic 850 hPa relative vorticity at the centre, 1/s (TECA)");
  opt("--tc-vorticity-window", p.tc_vorticity_window, "TC: the vorticity maximum is the largest within this many degrees (TECA)");
  opt("--tc-core-radius", p.tc_core_radius, "TC: the PSL minimum lies within this many degrees of the vorticity maximum (TECA)");
  opt("--tc-pressure-delta", p.tc_pressure_delta, "TC: PSL rise from the centre to the ring at --tc-pressure-radius, Pa (TECA)");
  opt("--tc-pressure-radius", p.tc_pressure_radius, "TC: radius of the pressure ring, degrees (TECA)");
  opt("--tc-warm-core-delta", p.tc_warm_core_delta, "TC: (T200+T500)/2 at the core above its ring mean, K (TECA)");
  opt("--tc-warm-core-radius", p.tc_warm_core_radius, "TC: radius of the warm-core ring, degrees (TECA)");
  opt("--tc-max-lat", p.tc_max_lat, "TC: centres only at |latitude| <= this, degrees");
  opt("--tc-radius", p.tc_radius_km, "TC mask: largest distance from the centre, km");
  opt("--tc-eye", p.tc_eye_km, "TC mask: every pixel this close to the centre belongs, km");
  opt("--tc-tmq-anomaly", p.tc_tmq_anomaly, "TC mask: TMQ above the mean on the ring at --tc-radius, kg/m^2");
  opt("--tc-wind", p.tc_wind, "TC mask: near-surface wind speed (UBOT, VBOT), m/s (or --tc-prect)");
  opt("--tc-prect", p.tc_prect, "TC mask: precipitation rate PRECT, m/s (or --tc-wind)");
  opt("--ar-tmq", p.ar_tmq, "AR: tropics-damped TMQ at or above this, kg/m^2");
  opt("--ar-anomaly", p.ar_anomaly, "AR: TMQ above the median of its latitude row, kg/m^2");
  opt("--ar-damp-hwhm", p.ar_damp_hwhm, "AR: tropical damping 1 - 2^-(lat/hwhm)^2, half width in degrees (0: none)");
  opt("--ar-min-length", p.ar_min_length_km, "AR: great-circle length of a plume, km");
  opt("--ar-min-aspect", p.ar_min_aspect, "AR: length / width, width = area / length");
  opt("--ar-min-reach-lat", p.ar_min_reach_lat, "AR: degrees of latitude some pixel of a river reaches (poleward)");
}

}  // namespace

void add_label_command(CLI::App& data, Context& ctx, Actions& actions) {
  CLI::App* sub = data.add_subcommand(
      "label", "Label DeepCAM-layout climate files with TECA-style heuristics (tropical cyclones, atmospheric rivers)");
  auto args = std::make_shared<LabelArgs>();
  sub->add_option("--in", args->in, "Folder of DeepCAM-layout files (data-*.h5, stats.h5) or of netCDF files (*.nc)")
      ->required();
  sub->add_option("--netcdf-variables", args->netcdf_variables,
                  "netCDF input: CHANNEL=variable pairs overriding the DeepCAM names (\"PSL=slp,TS=ts\"; "
                  "\"U850=u@850\" for one level of a variable on pressure levels)");
  sub->add_option("--out", args->out, "Folder for the relabelled copies (not --in)")->required();
  add_threshold_options(*sub, args->params);
  sub->add_flag("--json", args->json, "Print one JSON object (rank 0)");
  actions[sub] = [args] { return run_label(*args); };
}

}  // namespace squall::app
