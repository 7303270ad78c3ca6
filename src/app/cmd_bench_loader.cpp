// `squall bench loader --data DIR [--split train] [--batch 64] [--workers 2] [--prefetch 4]
// [--epochs 1] [--json]`: how fast the loader delivers batches with no training behind it,
// i.e. the ceiling the data path puts on samples/s. One rank reads every sample (global
// sampling over one rank); under mpirun every rank runs the same benchmark and rank 0
// reports its own.
//   samples_per_s  samples delivered by Loader::next() per second
//   MBps           float32 sample bytes delivered per second (what the trainer receives)
//   file_MBps      bytes of the dataset's files per second (what the storage delivers)
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "io/input/loader.hpp"
#include "io/input/sampler.hpp"
#include "src/app/cli.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"
#include "io/input/open_dataset.hpp"

namespace squall::app {
namespace {

struct BenchLoaderArgs {
  std::string data, split = "train";
  int64_t batch = 64;
  int workers = 2, prefetch = 4;
  int64_t epochs = 1;
  int64_t warmup_epochs = 1;
  bool cold = false;
  bool skip_bad = false;
  bool json = false;
};

// Drops the files' pages from the page cache (clean pages only, which is all a reader
// leaves), so the next read comes from storage.
void evict_from_page_cache(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int run_bench_loader(const BenchLoaderArgs& a) {
  // Streamed: the files are what is measured.
  const auto source = input::open_dataset(a.data, a.split, {.normalize = true, .cache_mb = 0});
  const input::Sampler sampler(input::Sampling::global, source->file_offsets(), {1}, 1);
  const int64_t batches = sampler.steps_per_epoch(a.batch);
  if (batches == 0)
    throw Error("dataset '" + a.data + "' holds " + std::to_string(source->size()) +
                " samples, fewer than one batch of " + std::to_string(a.batch));

  int64_t file_bytes = 0;  // per epoch: every file is read once
  std::error_code ec;
  for (const std::string& f : source->files()) {
    const auto size = std::filesystem::file_size(f, ec);
    if (!ec) file_bytes += static_cast<int64_t>(size);
  }

  input::LoaderOptions options;
  options.batch_size = a.batch;
  options.workers = a.workers;
  options.prefetch = a.prefetch;
  options.skip_bad = a.skip_bad;
  input::Loader loader(*source, options);

  // Untimed warm-up epochs first: the first touch of the batch buffers and the file opens are
  // one-off costs of a run, not of streaming. --cold then evicts the files from the page
  // cache before every timed epoch, so that each byte comes from storage.
  auto run_epoch = [&](int64_t epoch) {
    loader.start_epoch(sampler.indices(epoch, 0, 0), batches);
    while (const input::Batch* batch = loader.next()) loader.release(batch);
  };
  for (int64_t epoch = 0; epoch < a.warmup_epochs; ++epoch) run_epoch(-1 - epoch);
  const int64_t warmup_samples = loader.samples();
  double seconds = 0;
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    if (a.cold) evict_from_page_cache(source->files());
    const Stopwatch t;
    run_epoch(epoch);
    seconds += t.seconds();
  }

  const int64_t samples = loader.samples() - warmup_samples;
  const double sample_mb = static_cast<double>(samples * loader.sample_floats()) * sizeof(float) / 1e6;
  const double file_mb = static_cast<double>(file_bytes * a.epochs) / 1e6;
  const nlohmann::json doc{{"samples", samples},
                           {"seconds", seconds},
                           {"samples_per_s", samples / seconds},
                           {"MBps", sample_mb / seconds},
                           {"file_MBps", file_mb / seconds},
                           {"bad_samples", loader.bad_samples()},
                           {"batch", a.batch},
                           {"workers", a.workers},
                           {"prefetch", a.prefetch},
                           {"epochs", a.epochs},
                           {"warmup_epochs", a.warmup_epochs},
                           {"cold", a.cold},
                           {"files", source->files().size()}};
  if (process_rank() > 0) return 0;
  char line[512];
  std::snprintf(line, sizeof(line),
                "loader: %lld samples in %.3f s: %.0f samples/s, %.1f MB/s of samples, %.1f MB/s of files "
                "(batch %lld, %d workers, prefetch %d, %lld bad samples skipped)\n",
                static_cast<long long>(samples), seconds, samples / seconds, sample_mb / seconds, file_mb / seconds,
                static_cast<long long>(a.batch), a.workers, a.prefetch, static_cast<long long>(loader.bad_samples()));
  print_result(a.json, doc, line);
  return 0;
}

}  // namespace

void add_bench_loader_command(CLI::App& bench, Context&, Actions& actions) {
  CLI::App* sub = bench.add_subcommand("loader", "Loader throughput without training: samples/s and MB/s");
  auto args = std::make_shared<BenchLoaderArgs>();
  sub->add_option("--data", args->data, "Dataset folder (Fashion-MNIST IDX, squall shards or DeepCAM)")->required();
  sub->add_option("--split", args->split, "train or test (default train)");
  sub->add_option("--batch", args->batch, "Samples per batch (default 64)")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sub->add_option("--workers", args->workers, "Reader threads; 0 reads on the main thread (default 2)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--prefetch", args->prefetch, "Batches read ahead (default 4)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--warmup-epochs", args->warmup_epochs, "Untimed passes first (default 1)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub->add_flag("--cold", args->cold, "Evict the files from the page cache before every timed pass");
  sub->add_option("--epochs", args->epochs, "Timed passes over the data (default 1)")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sub->add_flag("--skip-bad", args->skip_bad, "Skip and count bad samples instead of failing");
  sub->add_flag("--json", args->json, "Print one JSON object");
  actions[sub] = [args] { return run_bench_loader(*args); };
}

}  // namespace squall::app
