// The shortcuts of evaluation and prediction (docs/inference.md, "Speed"): each computes what
// the general path computes.
// - A convolution told that its weights have not changed since the last forward of the same
//   version (RunMode::weights_version) may reuse the weights it folded and reordered then; a
//   new version, a plain forward or a new batch norm binding prepares them again.
// - The cross-entropy without the gradient gives the loss the gradient's pass gives, bit for
//   bit (the same arithmetic per pixel, the same sums).
// - The DeepCAM reader reads a contiguous, unfiltered file with pread() and anything else
//   through HDF5, labels stored as integers as int32 and others as float; predict's read
//   skips the labels. Every way gives the same samples and the same errors.
#include <catch2/catch.hpp>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/deepcam_file.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/layer.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/zoo_cases.hpp"

using namespace squall;
using Catch::Matchers::Contains;

namespace {

nn::Backend& be() { return test::test_backend(); }

std::vector<float> run_conv(nn::ConvPlan& plan, nn::Stream& s, const nn::Buffer& x, const nn::Buffer& w,
                            const nn::Buffer& b, nn::Buffer& y, uint64_t version) {
  if (version == 0)
    plan.forward(s, x.raw(), w.data(), b.data(), y.raw());
  else
    plan.forward_unchanged(s, x.raw(), w.data(), b.data(), y.raw(), version);
  return test::download(be(), y.data(), y.count());
}

nn::Buffer upload(nn::Stream& s, const std::vector<float>& v) {
  nn::Buffer b = be().allocate(v.size());
  be().copy_from_host(s, b.data(), v.data(), v.size());
  return b;
}

}  // namespace

TEST_CASE("conv plans: forward_unchanged reuses the weights it prepared for one version only", "[inference]") {
  auto s = be().create_stream();
  nn::ConvDesc d;
  d.n = 2, d.c = 16, d.h = 12, d.w = 10, d.k = 16, d.r = 3, d.s = 3, d.pad_h = 1, d.pad_w = 1;
  d.layout = be().capabilities().blocked_layout_for(nn::DType::f32);
  d.backward = false;
  const bool fold = be().capabilities().fuses(nn::DType::f32);  // the CUDA backend folds nothing yet
  d.fold_batch_norm = fold;
  d.relu = fold;
  auto plan = be().make_conv(d);
  const auto wshape = d.weight();
  nn::Buffer x = upload(*s, test::random_floats(static_cast<size_t>(d.n * d.c * d.h * d.w), 1));
  nn::Buffer w = upload(*s, test::random_floats(static_cast<size_t>(wshape.numel()), 2, 0.3f));
  nn::Buffer w2 = upload(*s, test::random_floats(static_cast<size_t>(wshape.numel()), 3, 0.3f));
  nn::Buffer b = upload(*s, test::random_floats(static_cast<size_t>(d.k), 4));
  std::vector<float> var = test::random_floats(static_cast<size_t>(d.k), 5);
  for (float& v : var) v = 0.3f + std::abs(v);
  std::vector<float> var2 = var;
  for (float& v : var2) v *= 4.0f;
  nn::Buffer gamma = upload(*s, test::random_floats(static_cast<size_t>(d.k), 6)),
             beta = upload(*s, test::random_floats(static_cast<size_t>(d.k), 7)),
             mean = upload(*s, test::random_floats(static_cast<size_t>(d.k), 8)), v1 = upload(*s, var),
             v2 = upload(*s, var2);
  if (fold) plan->bind_batch_norm(gamma.data(), beta.data(), mean.data(), v1.data());
  nn::Buffer y = be().allocate(static_cast<size_t>(d.output().numel()));
  nn::Buffer wcopy = be().allocate(w.count());
  be().copy(*s, wcopy.data(), w.data(), w.count());

  const uint64_t a = nn::new_weights_version(), later = nn::new_weights_version();
  REQUIRE(a != 0);
  REQUIRE(later != a);
  const std::vector<float> plain = run_conv(*plan, *s, x, w, b, y, 0);
  // The first call of a version prepares the weights as forward does: the same kernel on the
  // same prepared weights, the same bits.
  CHECK(run_conv(*plan, *s, x, w, b, y, a) == plain);
  const std::vector<float> plain2 = run_conv(*plan, *s, x, w2, b, y, 0);
  REQUIRE(plain2 != plain);
  // Other weight tensors with the same version: prepared again (the pointers differ).
  CHECK(run_conv(*plan, *s, x, w2, b, y, a) == plain2);
  CHECK(run_conv(*plan, *s, x, w2, b, y, a) == plain2);
  // The same tensors written in place under the same version: the caller broke its promise,
  // and the CPU plans show that they kept what they prepared (the point of the version).
  be().copy(*s, w2.data(), w.data(), w.count());
  const std::vector<float> stale = run_conv(*plan, *s, x, w2, b, y, a);
  if (be().name() == "cpu") CHECK(stale == plain2);
  // A new version prepares them again: the written values.
  CHECK(run_conv(*plan, *s, x, w2, b, y, later) == plain);
  if (fold) {
    // Binding other batch norm statistics prepares again under the same version.
    plan->bind_batch_norm(gamma.data(), beta.data(), mean.data(), v2.data());
    const std::vector<float> rebound = run_conv(*plan, *s, x, w2, b, y, later);
    CHECK(rebound != plain);
    CHECK(run_conv(*plan, *s, x, w2, b, y, 0) == rebound);
  }
  // A plain forward in between forgets the version's weights.
  be().copy(*s, w2.data(), wcopy.data(), w.count());  // back to w's values, written in place
  CHECK(run_conv(*plan, *s, x, w, b, y, later) == run_conv(*plan, *s, x, w, b, y, 0));
}

TEST_CASE("softmax cross-entropy: the loss alone is the loss computed with the gradient", "[inference][loss]") {
  if (!be().capabilities().loss_without_gradient) SQUALL_SKIP("this backend computes the loss with its gradient only");
  auto s = be().create_stream();
  const int64_t n = 3, classes = 4, hw = 77;
  const auto count = static_cast<size_t>(n * classes * hw);
  const std::vector<float> logits = test::random_floats(count, 21, 3.0f);
  std::vector<int32_t> labels(static_cast<size_t>(n * hw));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = i % 9 == 4 ? -1 : static_cast<int32_t>((i * 7) % classes);
  const std::vector<float> weights = {0.3f, 1.0f, 2.5f, 0.7f};
  for (const nn::DType t : {nn::DType::f32, nn::DType::bf16}) {
    INFO(nn::dtype_name(t));
    // bf16 logits: the f32 ones rounded to bf16 by dropping their low halves.
    std::vector<unsigned char> host(count * nn::dtype_size(t));
    if (t == nn::DType::f32) {
      std::memcpy(host.data(), logits.data(), host.size());
    } else {
      for (size_t i = 0; i < count; ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, &logits[i], 4);
        const auto half = static_cast<uint16_t>(bits >> 16);
        std::memcpy(host.data() + 2 * i, &half, 2);
      }
    }
    nn::Buffer dev = be().allocate(count, t);
    be().copy_bytes_from_host(*s, dev.raw(), host.data(), host.size());
    nn::Buffer lab = be().allocate(labels.size(), nn::DType::i32);
    be().copy_bytes_from_host(*s, lab.raw(), labels.data(), labels.size() * 4);
    nn::Buffer cw = upload(*s, weights), loss = be().allocate(2), grad = be().allocate(count, t);
    be().softmax_cross_entropy(*s, t, dev.raw(), lab.as<int32_t>(), cw.data(), n, classes, hw, grad.raw(),
                               loss.data(), nullptr);
    const std::vector<float> with = test::download(be(), loss.data(), 1);
    be().fill(*s, loss.data(), 2, -7.0f);
    be().softmax_cross_entropy(*s, t, dev.raw(), lab.as<int32_t>(), cw.data(), n, classes, hw, nullptr, loss.data(),
                               nullptr);
    const std::vector<float> alone = test::download(be(), loss.data(), 1);
    CHECK(with[0] > 0.1f);
    CHECK(std::memcmp(with.data(), alone.data(), sizeof(float)) == 0);
    // A label past the classes is the same error either way (raised by the call, or by the
    // stream's next synchronisation where the stream runs its work on a thread of its own).
    std::vector<int32_t> bad = labels;
    bad[100] = classes;
    be().copy_bytes_from_host(*s, lab.raw(), bad.data(), bad.size() * 4);
    for (const bool gradient : {true, false})
      CHECK_THROWS_WITH((be().softmax_cross_entropy(*s, t, dev.raw(), lab.as<int32_t>(), cw.data(), n, classes, hw,
                                                    gradient ? grad.raw() : nullptr, loss.data(), nullptr),
                         be().synchronize(*s)),
                        Contains("label 4 at position 100"));
  }
}

namespace {

// A DeepCAM file written with the HDF5 API the way other tools may write one: /climate/data
// float32 [h, w, c] chunked and compressed (so not readable raw), /climate/labels_0 of
// `label_type`.
void write_other_deepcam(const std::string& path, const std::vector<float>& hwc, int64_t h, int64_t w, int64_t c,
                         const std::vector<int32_t>& labels, hid_t label_type) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t g = H5Gcreate2(f, "climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t ddims[3] = {static_cast<hsize_t>(h), static_cast<hsize_t>(w), static_cast<hsize_t>(c)};
  const hsize_t chunk[3] = {static_cast<hsize_t>(h), 4, static_cast<hsize_t>(c)};
  const hid_t dspace = H5Screate_simple(3, ddims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  REQUIRE(H5Pset_chunk(dcpl, 3, chunk) >= 0);
  REQUIRE(H5Pset_deflate(dcpl, 4) >= 0);
  const hid_t data = H5Dcreate2(g, "data", H5T_IEEE_F32LE, dspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(H5Dwrite(data, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, hwc.data()) >= 0);
  const hsize_t ldims[2] = {static_cast<hsize_t>(h), static_cast<hsize_t>(w)};
  const hid_t lspace = H5Screate_simple(2, ldims, nullptr);
  const hid_t lab = H5Dcreate2(g, "labels_0", label_type, lspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Dwrite(lab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) >= 0);
  H5Dclose(lab);
  H5Sclose(lspace);
  H5Dclose(data);
  H5Pclose(dcpl);
  H5Sclose(dspace);
  H5Gclose(g);
  H5Fclose(f);
}

}  // namespace

TEST_CASE("DeepCAM reader: raw and HDF5 reads, float and integer labels, and predict's label-free read agree",
          "[inference][deepcam]") {
  test::TempDir dir("squall-read-paths");
  const int64_t h = 9, w = 13, c = 16;  // 117 pixels: 14 tiles of 8 and 5 left over
  std::vector<float> hwc = test::random_floats(static_cast<size_t>(h * w * c), 31, 50.0f);
  std::vector<int32_t> labels(static_cast<size_t>(h * w));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 5) % 3);
  const std::string raw = dir.file("data-raw.h5"), chunked = dir.file("data-chunked.h5"),
                    bytes = dir.file("data-uint8.h5");
  formats::write_deepcam_file(raw, formats::DeepcamFields{h, w, c, hwc}, labels);  // contiguous, int32 labels
  write_other_deepcam(chunked, hwc, h, w, c, labels, H5T_IEEE_F32LE);
  write_other_deepcam(bytes, hwc, h, w, c, labels, H5T_STD_U8LE);
  formats::OpenOptions raw_values;
  raw_values.normalize = false;
  auto src = formats::open_deepcam_files({raw, chunked, bytes}, "", raw_values);
  REQUIRE(src->size() == 3);
  const auto per = static_cast<size_t>(h * w * c), plane = static_cast<size_t>(h * w);
  std::vector<float> images(3 * per, -1.0f);
  std::vector<int32_t> got(3 * plane, -5);
  const std::vector<int64_t> all = {0, 1, 2};
  src->read(all, images.data(), got.data());
  for (size_t k = 0; k < 3; ++k) {
    INFO("file " << k);
    // CHW of the written HWC values, unchanged (normalize = false: (v - 0) * 1).
    bool same = true;
    for (int64_t p = 0; p < h * w; ++p)
      for (int64_t ch = 0; ch < c; ++ch)
        same &= images[k * per + static_cast<size_t>(ch * h * w + p)] == hwc[static_cast<size_t>(p * c + ch)];
    CHECK(same);
    CHECK(std::vector<int32_t>(got.begin() + static_cast<long>(k * plane),
                               got.begin() + static_cast<long>((k + 1) * plane)) == labels);
  }
  // Predict's read: the same images, the labels untouched.
  std::vector<float> again(3 * per, -1.0f);
  src->read(all, again.data(), nullptr);
  CHECK(again == images);

  // A value that is not finite is located on every path: the pixel and channel named.
  hwc[static_cast<size_t>(61 * c + 9)] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_raw = dir.file("nan-raw.h5"), nan_chunked = dir.file("nan-chunked.h5");
  formats::write_deepcam_file(nan_raw, formats::DeepcamFields{h, w, c, hwc}, labels);
  write_other_deepcam(nan_chunked, hwc, h, w, c, labels, H5T_IEEE_F32LE);
  auto bad = formats::open_deepcam_files({nan_raw, nan_chunked}, "", raw_values);
  for (const int64_t i : {int64_t{0}, int64_t{1}}) {
    const std::vector<int64_t> one = {i};
    CHECK_THROWS_WITH(bad->read(one, images.data(), nullptr), Contains("at pixel 61, channel 9"));
  }
  // A label outside the classes, stored as an integer or as a float: named with its pixel.
  hwc[static_cast<size_t>(61 * c + 9)] = 1.0f;
  labels[40] = 7;
  const std::string lab_int = dir.file("label-int.h5"), lab_float = dir.file("label-float.h5");
  formats::write_deepcam_file(lab_int, formats::DeepcamFields{h, w, c, hwc}, labels);
  write_other_deepcam(lab_float, hwc, h, w, c, labels, H5T_IEEE_F32LE);
  auto bad_labels = formats::open_deepcam_files({lab_int, lab_float}, "", raw_values);
  for (const int64_t i : {int64_t{0}, int64_t{1}}) {
    const std::vector<int64_t> one = {i};
    CHECK_THROWS_WITH(bad_labels->read(one, images.data(), got.data()), Contains("value 7.000000 at pixel 40"));
    CHECK_NOTHROW(bad_labels->read(one, images.data(), nullptr));  // predict reads no labels
  }
}
