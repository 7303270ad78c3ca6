#include "src/eval/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <span>

#include "src/eval/read_ahead.hpp"

namespace squall::eval {

EvalPart evaluate_range(nn::Graph& g, nn::Backend& be, nn::Stream& stream, const data::DataSource& test, int64_t begin,
                        int64_t end, int32_t* dev_labels, int32_t* dev_pred, const float* class_weights,
                        std::vector<pictures::PredictionSample>* pictures, const EvalTile& tile) {
  const int64_t batch = g.batch();
  const auto& info = test.info();
  const data::Window* window = tile.comm != nullptr ? tile.window : nullptr;
  const int64_t h = window ? window->rows : info.sample.h(), w = window ? window->cols : info.sample.w();
  const int64_t per_sample = info.sample.c() * h * w;
  const int64_t label_hw = info.per_pixel_labels ? h * w : 1;
  EvalPart part{nn::ConfusionMatrix(info.classes)};
  // The loss sum and the confusion matrix accumulate in backend memory and are read once at
  // the end: no host round trip per batch.
  const auto classes = static_cast<size_t>(info.classes);
  nn::Buffer loss = be.allocate(2);  // [this batch's mean loss, the sum over samples]
  nn::Buffer confusion = be.allocate(classes * classes, nn::DType::i32);
  // The loss writes the logits' gradient too (which a forward-only graph has no room for),
  // unless the backend computes the loss alone.
  nn::Buffer dlogits;
  if (!be.capabilities().loss_without_gradient) dlogits = be.allocate(static_cast<size_t>(g.output_shape().numel()), g.dtype());
  be.fill(stream, loss.data(), 2, 0.0f);
  be.fill(stream, reinterpret_cast<float*>(confusion.as<int32_t>()), classes * classes, 0.0f);  // 0.0f is all zero bits
  // Two host batches: while one is computed on, a thread reads the next samples into the other
  // (the files of a climate test set take as long to read as the model takes to run).
  struct HostBatch {
    std::vector<float> images;
    std::vector<int32_t> labels;
    std::vector<int64_t> idx;
  };
  HostBatch host[2];
  for (HostBatch& h : host) {
    h.images.resize(static_cast<size_t>(batch * per_sample));
    h.labels.resize(static_cast<size_t>(batch * label_hw));
    h.idx.resize(static_cast<size_t>(batch));
  }
  const auto read_batch = [&](HostBatch& h, int64_t start) {
    const int64_t valid = std::min(batch, end - start);
    for (int64_t i = 0; i < batch; ++i) h.idx[static_cast<size_t>(i)] = start + std::min(i, valid - 1);
    if (window) test.read_window(h.idx, *window, h.images.data(), h.labels.data());
    else test.read(h.idx, h.images.data(), h.labels.data());
    std::fill(h.labels.begin() + valid * label_hw, h.labels.end(), -1);  // padding: ignored
  };
  ReadAhead next;  // declared after `host`, which the read in flight uses: waited for first
  if (begin < end) read_batch(host[0], begin);
  nn::RunMode mode;
  mode.train = false;
  // Nothing writes the weights while this evaluation runs: the convolutions fold and reorder
  // them at the first batch only.
  mode.weights_version = nn::new_weights_version();
  for (int64_t start = begin, k = 0; start < end; start += batch, ++k) {
    const int64_t valid = std::min(batch, end - start);
    next.wait();  // this batch's read; rethrows its error
    HostBatch& cur = host[k % 2];
    if (start + batch < end) next.start([&, k, start] { read_batch(host[(k + 1) % 2], start + batch); });
    const std::vector<float>& images = cur.images;
    const std::vector<int32_t>& labels = cur.labels;
    // A tile's share of its samples' label weights, summed over the group by this thread,
    // which is the graph's: the stream has finished the batch before, whose layers exchange
    // halos over the same communicator.
    double share = 1;
    if (window) {
      be.synchronize(stream);
      const double mine = nn::label_weight_sum(
          labels.data(), labels.size(), tile.class_weights.empty() ? nullptr : tile.class_weights.data(),
          tile.class_weights.empty() ? info.classes : static_cast<int64_t>(tile.class_weights.size()));
      double total = mine;
      tile.comm->sum(&total, 1);
      share = total > 0 ? mine / total : 0.0;
    }
    // Pageable host memory: these copies have read it when they return, so the read after
    // the next may overwrite it.
    be.copy_from_host(stream, g.input().f32(), images.data(), images.size());
    be.copy_labels_from_host(stream, dev_labels, labels.data(), labels.size());
    g.forward(stream, mode);
    const auto out = g.output_shape();
    be.softmax_cross_entropy(stream, g.dtype(), g.output().data, dev_labels, class_weights, out.n(), out.c(),
                             out.h() * out.w(), dlogits ? dlogits.raw() : nullptr, loss.data(), nullptr);
    be.axpy(stream, static_cast<float>(static_cast<double>(valid) * share), loss.data(), loss.data() + 1, 1);
    be.argmax_channels(stream, g.dtype(), g.output().data, dev_pred, out.n(), out.c(), out.h() * out.w());
    be.accumulate_confusion(stream, dev_labels, dev_pred, static_cast<size_t>(valid * label_hw), info.classes,
                            confusion.as<int32_t>());
    if (pictures && start == begin && info.per_pixel_labels) {  // the first batch only: one wait
      const auto keep = static_cast<size_t>(std::min<int64_t>(valid, static_cast<int64_t>(pictures->size())));
      pictures->resize(keep);
      std::vector<int32_t> pred(static_cast<size_t>(valid * label_hw));
      be.copy_labels_to_host(stream, pred.data(), dev_pred, pred.size());
      be.synchronize(stream);
      for (size_t k = 0; k < keep; ++k) {
        pictures::PredictionSample& p = (*pictures)[k];
        const auto first = static_cast<int64_t>(k);
        const float* image = images.data() + first * per_sample;  // channel 0 of sample k
        p.channel.assign(image, image + label_hw);
        p.label.assign(labels.begin() + first * label_hw, labels.begin() + (first + 1) * label_hw);
        p.pred.assign(pred.begin() + first * label_hw, pred.begin() + (first + 1) * label_hw);
      }
    }
    if (!window || tile.comm->group_rank() == 0) part.samples += static_cast<double>(valid);
  }
  float host_loss[2] = {0, 0};
  std::vector<int32_t> counts(classes * classes);
  be.copy_to_host(stream, host_loss, loss.data(), 2);
  be.copy_labels_to_host(stream, counts.data(), confusion.as<int32_t>(), counts.size());
  be.synchronize(stream);
  part.loss_sum = static_cast<double>(host_loss[1]);
  for (size_t i = 0; i < counts.size(); ++i) part.cm.counts()[i] += counts[i];
  return part;
}


void sum_over_ranks(EvalPart& part, const mpi::Communicator& world) {
  if (world.size() == 1) return;
  const auto counts = part.cm.counts();  // a view of the matrix
  std::vector<double> sums(counts.size() + 2);
  for (size_t i = 0; i < counts.size(); ++i) sums[i] = static_cast<double>(counts[i]);
  sums[sums.size() - 2] = part.loss_sum;
  sums.back() = part.samples;
  world.allreduce_sum(std::span<double>(sums));
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(sums[i]);
  part.loss_sum = sums[sums.size() - 2];
  part.samples = sums.back();
}


}  // namespace squall::eval
