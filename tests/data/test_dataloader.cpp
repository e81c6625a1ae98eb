// DataLoader: determinism for a seed whatever the worker count, epochs change
// the order, drop_last, normalization, each augmentation on a known image,
// and clean shutdown mid-epoch.
#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "data/data_internal.h"
#include "kiln/data.h"
#include "testing/errors.h"

namespace kiln::data {
namespace {

// n images [C, H, W] with pixel (i, c, y, x) = pix(i, c, y, x); label i % 10.
uint8_t pix(int64_t i, int64_t c, int64_t y, int64_t x) { return static_cast<uint8_t>((i * 29 + c * 80 + y * 9 + x * 2 + 1) & 255); }

std::shared_ptr<ImageDataset> make_set(int64_t n, int64_t C = 3, int64_t H = 8, int64_t W = 8) {
  auto ds = std::make_shared<ImageDataset>();
  ds->images = Tensor::empty({n, C, H, W}, DType::UInt8);
  ds->labels = Tensor::empty({n}, DType::Int64);
  uint8_t* p = ds->images.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    ds->labels.data<int64_t>()[i] = i % 10;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) p[((i * C + c) * H + y) * W + x] = pix(i, c, y, x);
  }
  ds->source = "test";
  return ds;
}

// Each image's index is recoverable from its labels only mod 10; use a set
// whose labels are the index itself.
std::shared_ptr<ImageDataset> make_indexed_set(int64_t n, int64_t C = 3, int64_t H = 8, int64_t W = 8) {
  auto ds = make_set(n, C, H, W);
  for (int64_t i = 0; i < n; ++i) ds->labels.data<int64_t>()[i] = i;
  return ds;
}

std::vector<std::vector<float>> epoch_images(DataLoader& dl, int64_t epoch, std::vector<int64_t>* labels = nullptr) {
  dl.start_epoch(epoch);
  std::vector<std::vector<float>> out;
  while (auto b = dl.next()) {
    out.push_back(b->images.to_vector<float>());
    if (labels)
      for (int64_t l : b->labels.to_vector<int64_t>()) labels->push_back(l);
  }
  return out;
}

DataLoaderOptions aug_options(int workers) {
  DataLoaderOptions o;
  o.batch_size = 7;
  o.seed = 1234;
  o.workers = workers;
  o.prefetch = 2;
  o.augment.crop_padding = 2;
  o.augment.flip = true;
  o.augment.translate = 1;
  o.mean = kCifar10Mean;
  o.std = kCifar10Std;
  return o;
}

TEST(DataLoader, SameSeedSameBatchesWhateverTheWorkers) {
  auto ds = make_indexed_set(50);
  std::vector<std::vector<std::vector<float>>> runs;
  std::vector<std::vector<int64_t>> labels(4);
  int r = 0;
  for (int workers : {0, 1, 3, 3}) {
    DataLoader dl(ds, aug_options(workers));
    runs.push_back(epoch_images(dl, 2, &labels[r++]));
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i], runs[0]) << i;
    EXPECT_EQ(labels[i], labels[0]) << i;
  }
  // Every image exactly once per epoch.
  std::vector<int64_t> sorted = labels[0];
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  // A different seed changes the order.
  DataLoaderOptions o = aug_options(2);
  o.seed = 99;
  DataLoader other(ds, o);
  std::vector<int64_t> other_labels;
  epoch_images(other, 2, &other_labels);
  EXPECT_NE(other_labels, labels[0]);
}

// memory_format = ChannelsLast: NHWC strides, the same values as the contiguous batches.
TEST(DataLoader, ChannelsLastBatchesHoldTheSameValues) {
  auto ds = make_indexed_set(20);
  DataLoader plain(ds, aug_options(2));
  DataLoaderOptions o = aug_options(2);
  o.memory_format = MemoryFormat::ChannelsLast;
  DataLoader nhwc(ds, o);
  plain.start_epoch(1);
  nhwc.start_epoch(1);
  while (auto a = plain.next()) {
    auto b = nhwc.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(is_contiguous(b->images, MemoryFormat::ChannelsLast));
    EXPECT_FALSE(b->images.is_contiguous());
    EXPECT_EQ(b->images.contiguous().to_vector<float>(), a->images.to_vector<float>());
    EXPECT_EQ(b->labels.to_vector<int64_t>(), a->labels.to_vector<int64_t>());
  }
  EXPECT_FALSE(nhwc.next().has_value());
}

TEST(DataLoader, EpochChangesOrderAndRepeatsWhenRestarted) {
  auto ds = make_indexed_set(40);
  DataLoader dl(ds, aug_options(2));
  std::vector<int64_t> e0, e1, e0again;
  auto i0 = epoch_images(dl, 0, &e0);
  epoch_images(dl, 1, &e1);
  auto i0again = epoch_images(dl, 0, &e0again);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, e0again);
  EXPECT_EQ(i0, i0again);
  // Without shuffle: dataset order.
  DataLoaderOptions o = aug_options(2);
  o.shuffle = false;
  DataLoader plain(ds, o);
  std::vector<int64_t> l;
  epoch_images(plain, 5, &l);
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(l[i], i);
}

TEST(DataLoader, DropLastAndBatchCounts) {
  auto ds = make_set(10);
  for (bool drop : {false, true}) {
    for (int workers : {0, 2}) {
      DataLoaderOptions o;
      o.batch_size = 4;
      o.drop_last = drop;
      o.workers = workers;
      DataLoader dl(ds, o);
      EXPECT_EQ(dl.batches_per_epoch(), drop ? 2 : 3);
      std::vector<int64_t> sizes;
      // next() before start_epoch starts epoch 0.
      while (auto b = dl.next()) {
        sizes.push_back(b->images.size(0));
        EXPECT_EQ(b->labels.size(0), b->images.size(0));
      }
      EXPECT_EQ(sizes, drop ? (std::vector<int64_t>{4, 4}) : (std::vector<int64_t>{4, 4, 2}));
      EXPECT_FALSE(dl.next().has_value());
    }
  }
}

TEST(DataLoader, NormalizationValues) {
  auto ds = make_set(3);
  DataLoaderOptions o;
  o.batch_size = 3;
  o.shuffle = false;
  o.workers = 1;
  o.mean = kCifar10Mean;
  o.std = kCifar10Std;
  DataLoader dl(ds, o);
  auto b = dl.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->images.dtype(), DType::Float32);
  EXPECT_EQ(b->labels.dtype(), DType::Int64);
  ASSERT_EQ(b->images.shape(), (Shape{3, 3, 8, 8}));
  auto v = b->images.to_vector<float>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 8; ++y)
        for (int64_t x = 0; x < 8; ++x) {
          float want = (pix(i, c, y, x) / 255.f - kCifar10Mean[c]) / kCifar10Std[c];
          ASSERT_NEAR(v[((i * 3 + c) * 8 + y) * 8 + x], want, 1e-5f);
        }
  // No mean/std: pixel / 255.
  DataLoaderOptions raw = o;
  raw.mean.clear();
  raw.std.clear();
  DataLoader dl2(ds, raw);
  auto v2 = dl2.next()->images.to_vector<float>();
  EXPECT_FLOAT_EQ(v2[5], pix(0, 0, 0, 5) / 255.f);
  EXPECT_EQ(b->labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

// Runs assemble_image without normalization and returns pixel values (0..255).
std::vector<int> assembled(const ImageDataset& ds, int64_t i, const AugmentOptions& opt,
                           const detail::ImageAugment& aug) {
  const int64_t C = ds.images.size(1), H = ds.images.size(2), W = ds.images.size(3);
  detail::Normalizer norm = detail::make_normalizer(C, {}, {});
  std::vector<float> out(C * H * W);
  detail::assemble_image(ds.images.data<uint8_t>() + i * C * H * W, C, H, W, opt, aug, norm, out.data());
  std::vector<int> px(out.size());
  for (size_t k = 0; k < out.size(); ++k) px[k] = static_cast<int>(std::lround(out[k] * 255.f));
  return px;
}

TEST(DataAugment, FlipCropTranslateOnAKnownImage) {
  auto ds = make_set(1, 2, 6, 5);
  const int64_t H = 6, W = 5;
  auto at = [&](const std::vector<int>& v, int c, int y, int x) { return v[(c * H + y) * W + x]; };
  AugmentOptions none;
  auto id = assembled(*ds, 0, none, {});
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) EXPECT_EQ(at(id, c, y, x), pix(0, c, y, x));
  // Flip.
  AugmentOptions flip;
  flip.flip = true;
  detail::ImageAugment a;
  a.flip = true;
  auto f = assembled(*ds, 0, flip, a);
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) EXPECT_EQ(at(f, c, y, x), pix(0, c, y, W - 1 - x));
  // Crop with zero padding 2 at offset (0, 3): out(y, x) = img(y - 2, x + 1), zero outside.
  AugmentOptions crop;
  crop.crop_padding = 2;
  detail::ImageAugment ca;
  ca.crop_y = 0;
  ca.crop_x = 3;
  auto cr = assembled(*ds, 0, crop, ca);
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        int sy = y - 2, sx = x + 1;
        int want = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? pix(0, c, sy, sx) : 0;
        EXPECT_EQ(at(cr, c, y, x), want) << c << " " << y << " " << x;
      }
  // Crop at the centre offset is the identity.
  ca.crop_y = ca.crop_x = 2;
  EXPECT_EQ(assembled(*ds, 0, crop, ca), id);
  // Translate 2 with reflect padding at offset (4, 0): out(y, x) = img(refl(y + 2), refl(x - 2)).
  AugmentOptions tr;
  tr.translate = 2;
  detail::ImageAugment ta;
  ta.translate_y = 4;
  ta.translate_x = 0;
  auto refl = [](int i, int n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); };
  auto t = assembled(*ds, 0, tr, ta);
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        EXPECT_EQ(at(t, c, y, x), pix(0, c, refl(y + 2, H), refl(x - 2, W))) << c << " " << y << " " << x;
  // Flip + crop: the crop window is taken from the flipped image.
  AugmentOptions fc;
  fc.flip = true;
  fc.crop_padding = 1;
  detail::ImageAugment fca;
  fca.flip = true;
  fca.crop_y = 1;
  fca.crop_x = 0;
  auto fcv = assembled(*ds, 0, fc, fca);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      int fx = x - 1;  // column in the flipped image
      int want = (fx >= 0 && fx < W) ? pix(0, 1, y, W - 1 - fx) : 0;
      EXPECT_EQ(at(fcv, 1, y, x), want);
    }
}

TEST(DataAugment, DrawsAreSeededAndInRange) {
  AugmentOptions opt;
  opt.flip = true;
  opt.crop_padding = 4;
  opt.translate = 2;
  int flips = 0;
  std::set<int> crops, translates;
  for (int64_t i = 0; i < 2000; ++i) {
    auto a = detail::draw_augment(opt, 7, 3, i);
    auto b = detail::draw_augment(opt, 7, 3, i);
    EXPECT_EQ(a.flip, b.flip);
    EXPECT_EQ(a.crop_x, b.crop_x);
    flips += a.flip;
    ASSERT_GE(a.crop_y, 0);
    ASSERT_LE(a.crop_y, 8);
    ASSERT_LE(a.crop_x, 8);
    ASSERT_LE(a.translate_x, 4);
    ASSERT_LE(a.translate_y, 4);
    crops.insert(a.crop_x);
    translates.insert(a.translate_y);
  }
  EXPECT_NEAR(flips, 1000, 120);
  EXPECT_EQ(crops.size(), 9u);
  EXPECT_EQ(translates.size(), 5u);
}

TEST(DataAugment, AlternatingFlip) {
  AugmentOptions opt;
  opt.alternating_flip = true;
  int flipped0 = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    bool f0 = detail::draw_augment(opt, 5, 0, i).flip;
    flipped0 += f0;
    for (int64_t e = 1; e < 6; ++e) EXPECT_EQ(detail::draw_augment(opt, 5, e, i).flip, f0 != (e % 2 == 1)) << i << " " << e;
  }
  EXPECT_NEAR(flipped0, 500, 80);
  // Through the loader: each image is flipped in exactly one of epochs 0 and 1.
  auto ds = make_indexed_set(20, 1, 2, 4);
  DataLoaderOptions o;
  o.batch_size = 20;
  o.shuffle = false;
  o.workers = 1;
  o.augment.alternating_flip = true;
  DataLoader dl(ds, o);
  auto e0 = epoch_images(dl, 0)[0];
  auto e1 = epoch_images(dl, 1)[0];
  auto e2 = epoch_images(dl, 2)[0];
  EXPECT_EQ(e0, e2);
  for (int64_t i = 0; i < 20; ++i) {
    bool f0 = std::lround(e0[i * 8] * 255.f) != pix(i, 0, 0, 0);
    bool f1 = std::lround(e1[i * 8] * 255.f) != pix(i, 0, 0, 0);
    EXPECT_NE(f0, f1) << i;
  }
}

TEST(DataLoader, StopsCleanlyMidEpoch) {
  auto ds = make_set(200);
  for (int round = 0; round < 5; ++round) {
    DataLoaderOptions o = aug_options(3);
    o.batch_size = 4;
    o.prefetch = 2;
    DataLoader dl(ds, o);
    dl.start_epoch(0);
    ASSERT_TRUE(dl.next());
    dl.start_epoch(1);  // abandons epoch 0 with workers blocked on a full queue
    int n = 0;
    while (dl.next()) ++n;
    EXPECT_EQ(n, 50);
    dl.start_epoch(2);
    ASSERT_TRUE(dl.next());
  }  // destroyed with workers waiting
}

TEST(DataLoader, BadOptionsAndDatasets) {
  auto ds = make_set(4);
  DataLoaderOptions o;
  o.batch_size = 0;
  EXPECT_KILN_ERROR(DataLoader(ds, o), "batch_size");
  o.batch_size = 2;
  o.mean = {0.5f, 0.5f};
  o.std = {0.5f, 0.5f};
  EXPECT_KILN_ERROR(DataLoader(ds, o), "mean/std", "3 channels");
  o.mean.clear();
  o.std.clear();
  o.augment.translate = 8;
  EXPECT_KILN_ERROR(DataLoader(ds, o), "translate");
  auto flat = std::make_shared<ImageDataset>();
  flat->images = Tensor::empty({4, 8}, DType::UInt8);
  flat->labels = Tensor::empty({4}, DType::Int64);
  EXPECT_KILN_ERROR(DataLoader(flat, DataLoaderOptions{}), "uint8 [N, C, H, W]");
}

}  // namespace
}  // namespace kiln::data
