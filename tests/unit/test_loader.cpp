// The prefetching loader against an in-memory source whose sample i holds the value i:
// order and content, read-ahead bounds, bad samples skipped or thrown, and no hangs.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "io/input/loader.hpp"
#include "src/core/error.hpp"

using squall::input::Batch;
using squall::input::Loader;
using squall::input::LoaderOptions;
using squall::data::BadSample;

namespace {

constexpr int64_t k_floats = 4;  // samples are [1, 1, 2, 2]

class FakeSource : public squall::data::DataSource {
 public:
  explicit FakeSource(int64_t n, std::set<int64_t> bad = {}, int sleep_ms = 0)
      : m_n(n), m_bad(std::move(bad)), m_sleep_ms(sleep_ms) {
    m_info.sample = squall::nn::Shape(1, 1, 2, 2);
    m_info.classes = 10;
    m_info.description = "fake";
  }
  const squall::data::DatasetInfo& info() const override { return m_info; }
  int64_t size() const override { return m_n; }
  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
    if (m_sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(m_sleep_ms));
    for (size_t j = 0; j < indices.size(); ++j) {
      const int64_t i = indices[j];
      {
        std::lock_guard lock(m_mutex);
        m_read.insert(i);
      }
      if (i == m_fail_hard) throw squall::Error("fake: file of sample " + std::to_string(i) + " vanished");
      if (m_bad.count(i)) throw BadSample("fake: sample " + std::to_string(i) + " holds NaN", "fake.h5", i);
      for (int64_t k = 0; k < k_floats; ++k) images[j * k_floats + k] = static_cast<float>(i);
      labels[j] = static_cast<int32_t>(i);
    }
  }
  std::set<int64_t> read_so_far() const {
    std::lock_guard lock(m_mutex);
    return m_read;
  }
  int64_t m_fail_hard = -1;  // this index throws a plain squall::Error

 private:
  int64_t m_n;
  std::set<int64_t> m_bad;
  int m_sleep_ms;
  squall::data::DatasetInfo m_info;
  mutable std::mutex m_mutex;
  mutable std::set<int64_t> m_read;
};

// A shuffled list 0..n-1, fixed.
std::vector<int64_t> shuffled(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[(i * 7919 + 13) % i]);
  return v;
}

// Fails the test run (instead of hanging it) when `body` does not finish in time.
template <class F>
void within_seconds(int seconds, F body) {
  auto done = std::async(std::launch::async, body);
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "test_loader: hung for %d s\n", seconds);
    std::_Exit(1);
  }
  done.get();  // rethrows a failed REQUIRE
}

void check_batch(const Batch& b, std::span<const int64_t> expect) {
  REQUIRE(b.size == static_cast<int64_t>(expect.size()));
  REQUIRE(b.indices == std::vector<int64_t>(expect.begin(), expect.end()));
  for (size_t j = 0; j < expect.size(); ++j) {
    REQUIRE(b.labels[j] == expect[j]);
    for (int64_t k = 0; k < k_floats; ++k) REQUIRE(b.images[j * k_floats + k] == static_cast<float>(expect[j]));
  }
}

LoaderOptions options(int64_t batch, int workers, int prefetch, int64_t per_read = 1, bool skip_bad = false) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.prefetch = prefetch;
  o.samples_per_read = per_read;
  o.skip_bad = skip_bad;
  return o;
}

}  // namespace

TEST_CASE("batches arrive in order with the samples of the index list", "[loader]") {
  FakeSource source(100);
  const auto list = shuffled(100);
  for (const int workers : {0, 1, 3})
    for (const int prefetch : {1, 3})
      for (const int64_t per_read : {1, 3}) {
        INFO("workers " << workers << ", prefetch " << prefetch << ", per read " << per_read);
        within_seconds(20, [&] {
          Loader loader(source, options(8, workers, prefetch, per_read));
          for (int epoch = 0; epoch < 2; ++epoch) {
            loader.start_epoch(list, 12);
            for (int64_t k = 0; k < 12; ++k) {
              const Batch* b = loader.next();
              REQUIRE(b != nullptr);
              REQUIRE(b->number == k);
              REQUIRE(reinterpret_cast<uintptr_t>(b->images) % 64 == 0);
              check_batch(*b, std::span(list).subspan(static_cast<size_t>(k * 8), 8));
              loader.release(b);
            }
            REQUIRE(loader.next() == nullptr);
            REQUIRE(loader.next() == nullptr);
          }
          CHECK(loader.samples() == 2 * 96);
          CHECK(loader.bad_samples() == 0);
        });
      }
}

TEST_CASE("with a window, batches hold the window of each sample, bad ones replaced as without", "[loader]") {
  FakeSource source(60, {5, 17});
  const auto list = shuffled(60);
  for (const int workers : {0, 3}) {
    INFO("workers " << workers);
    within_seconds(20, [&] {
      LoaderOptions o = options(6, workers, 2, 2, true);
      o.window = squall::data::Window{1, 1, 0, 2};  // the second row of each [2, 2] sample
      Loader loader(source, o);
      REQUIRE(loader.sample_floats() == 2);
      REQUIRE(loader.sample_labels() == 1);
      loader.start_epoch(list, 8);
      for (int64_t k = 0; k < 8; ++k) {
        const Batch* b = loader.next();
        REQUIRE(b != nullptr);
        for (size_t j = 0; j < 6; ++j) {
          const int64_t i = b->indices[j];
          REQUIRE(i != 5);
          REQUIRE(i != 17);
          REQUIRE(b->labels[j] == i);
          REQUIRE(b->images[2 * j] == static_cast<float>(i));
          REQUIRE(b->images[2 * j + 1] == static_cast<float>(i));
        }
        loader.release(b);
      }
      REQUIRE(loader.next() == nullptr);
    });
  }
}

TEST_CASE("workers read at most `prefetch` batches ahead", "[loader]") {
  within_seconds(20, [] {
    FakeSource source(50);
    Loader loader(source, options(2, 4, 3));
    std::vector<int64_t> list(50);
    std::iota(list.begin(), list.end(), 0);
    loader.start_epoch(list, 25);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(source.read_so_far().size() == 6);  // 3 batches of 2, and not one more
    const Batch* b = loader.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(source.read_so_far().size() == 8);  // the window moved by one batch
    loader.release(b);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(source.read_so_far().size() == 8);  // releasing frees a buffer, not a window slot
  });
}

TEST_CASE("bad samples are skipped, counted and replaced from the rest of the list", "[loader]") {
  const auto list = shuffled(16);
  // Batches of 4, 3 batches: positions 12..15 are the remainder that replaces bad samples.
  // list[12] is bad too, so the replacements are list[13] and list[14].
  const std::set<int64_t> bad{list[3], list[10], list[12]};
  FakeSource source(16, bad);
  for (const int workers : {0, 1, 3})
    for (const int64_t per_read : {1, 4}) {
      INFO("workers " << workers << ", per read " << per_read);
      within_seconds(20, [&] {
        Loader loader(source, options(4, workers, 2, per_read, true));
        loader.start_epoch(list, 3);
        std::vector<std::vector<int64_t>> expect{{list[0], list[1], list[2], list[13]},
                                                 {list[4], list[5], list[6], list[7]},
                                                 {list[8], list[9], list[14], list[11]}};
        for (const auto& e : expect) {
          const Batch* b = loader.next();
          REQUIRE(b != nullptr);
          check_batch(*b, e);
          loader.release(b);
        }
        CHECK(loader.next() == nullptr);
        CHECK(loader.bad_samples() == 3);
      });
    }
}

TEST_CASE("with no remainder left, replacements wrap to the start of the list", "[loader]") {
  within_seconds(20, [] {
    FakeSource source(8, {5});
    Loader loader(source, options(4, 2, 2, 1, true));
    const std::vector<int64_t> list{0, 1, 2, 3, 4, 5, 6, 7};
    loader.start_epoch(list, 2);
    loader.release(loader.next());
    const Batch* b = loader.next();
    check_batch(*b, std::vector<int64_t>{4, 0, 6, 7});
    loader.release(b);

    FakeSource all_bad(4, {0, 1, 2, 3});
    Loader hopeless(all_bad, options(2, 1, 2, 1, true));
    hopeless.start_epoch({0, 1, 2, 3}, 1);
    CHECK_THROWS_WITH(hopeless.next(), Catch::Contains("no usable sample"));
  });
}

TEST_CASE("without skip_bad a bad sample is thrown from next(), after the batches before it", "[loader]") {
  const auto list = shuffled(40);
  for (const int workers : {0, 1, 4}) {
    INFO("workers " << workers);
    within_seconds(20, [&] {
      FakeSource source(40, {list[10]});
      Loader loader(source, options(4, workers, 3));
      loader.start_epoch(list, 10);
      for (int k = 0; k < 2; ++k) {
        const Batch* b = loader.next();
        REQUIRE(b != nullptr);
        loader.release(b);
      }
      try {
        loader.next();
        FAIL("next() should have thrown");
      } catch (const BadSample& e) {
        CHECK(e.index() == list[10]);
        CHECK(e.file() == "fake.h5");
      }
      CHECK_THROWS_AS(loader.next(), BadSample);  // stays failed until the next epoch
      // A new epoch without the bad sample runs normally.
      std::vector<int64_t> good(list.begin(), list.begin() + 8);
      loader.start_epoch(good, 2);
      for (int k = 0; k < 2; ++k) loader.release(loader.next());
      CHECK(loader.next() == nullptr);
    });
  }
}

TEST_CASE("other read errors are thrown from next() even with skip_bad", "[loader]") {
  within_seconds(20, [] {
    FakeSource source(20);
    source.m_fail_hard = 9;
    Loader loader(source, options(4, 2, 2, 1, true));
    std::vector<int64_t> list(20);
    std::iota(list.begin(), list.end(), 0);
    loader.start_epoch(list, 5);
    loader.release(loader.next());
    loader.release(loader.next());
    CHECK_THROWS_WITH(loader.next(), Catch::Contains("vanished"));
  });
}

TEST_CASE("a new epoch abandons the old one, and the destructor does not wait for the data", "[loader]") {
  within_seconds(20, [] {
    FakeSource slow(1000, {}, 20);
    Loader loader(slow, options(4, 3, 4));
    const auto list = shuffled(1000);
    loader.start_epoch(list, 250);
    loader.release(loader.next());
    std::vector<int64_t> other(list.rbegin(), list.rend());
    loader.start_epoch(other, 3);
    for (int64_t k = 0; k < 3; ++k) {
      const Batch* b = loader.next();
      check_batch(*b, std::span(other).subspan(static_cast<size_t>(k * 4), 4));
      loader.release(b);
    }
    CHECK(loader.next() == nullptr);
    CHECK(loader.io_wait_s() > 0.0);
  });
  within_seconds(5, [] {
    FakeSource slow(1000, {}, 50);
    const auto t0 = std::chrono::steady_clock::now();
    {
      Loader loader(slow, options(8, 4, 8));
      loader.start_epoch(shuffled(1000), 125);
      loader.next();  // workers are mid-read when the loader goes away
    }
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  });
}

TEST_CASE("holding every buffer and asking for more is an error, not a hang", "[loader]") {
  within_seconds(20, [] {
    FakeSource source(40);
    for (const int workers : {0, 2}) {
      Loader loader(source, options(2, workers, 1));  // two buffers
      loader.start_epoch(shuffled(40), 20);
      const Batch* a = loader.next();
      const Batch* b = loader.next();
      REQUIRE(a != nullptr);
      REQUIRE(b != nullptr);
      CHECK_THROWS_WITH(loader.next(), Catch::Contains("release()"));
    }
  });
}

TEST_CASE("batch buffers come from host_alloc when given, allocated once", "[loader]") {
  std::atomic<int> allocs{0}, frees{0};
  {
    LoaderOptions o = options(4, 2, 3);
    o.host_alloc = [&](size_t bytes) {
      ++allocs;
      return std::aligned_alloc(64, bytes);
    };
    o.host_free = [&](void* p) {
      ++frees;
      std::free(p);
    };
    FakeSource source(40);
    Loader loader(source, o);
    for (int epoch = 0; epoch < 3; ++epoch) {
      loader.start_epoch(shuffled(40), 10);
      while (const Batch* b = loader.next()) loader.release(b);
    }
    CHECK(allocs == 8);  // (prefetch + 1) buffers, images and labels
  }
  CHECK(frees == 8);
  FakeSource source(4);
  CHECK_THROWS_AS(Loader(source, options(0, 1, 1)), squall::Error);
  CHECK_THROWS_AS(Loader(source, options(1, 1, 0)), squall::Error);
  Loader loader(source, options(2, 1, 1));
  CHECK_THROWS_WITH(loader.start_epoch({0, 1, 2}, 2), Catch::Contains("need 4 indices"));
  CHECK_THROWS_WITH(loader.start_epoch({0, 9}, 1), Catch::Contains("out of range"));
}
