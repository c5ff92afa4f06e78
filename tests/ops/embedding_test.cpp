#include <gtest/gtest.h>

#include <omp.h>

#include "amber/ops/embedding.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;

TEST(Embedding, GatherAndDeterministicScatterAdd) {
  const Tensor table = random_tensor({11, 130}, DType::f64, 1);
  const Tensor ids = Tensor::from_vector<int32_t>({3, 0, 3, 10, 3, 7}, {6});
  Tensor out = Tensor::empty({6, 130}, DType::f64);
  embedding_forward(table, ids, out);
  for (int t = 0; t < 6; ++t)
    for (int c = 0; c < 130; c += 13)
      EXPECT_EQ(out.item(t * 130 + c), table.item(ids.item(t) * 130 + c));
  // The backward is the exact transpose of the gather: <dout, gather(table)> ==
  // <scatter(dout), table>.
  const Tensor dout = random_tensor({6, 130}, DType::f64, 2);
  Tensor dtable = Tensor::zeros(table.shape(), DType::f64);
  embedding_backward(dout, ids, dtable);
  EXPECT_NEAR(testing::project(out, dout), testing::project(dtable, table), 1e-10);
  EXPECT_EQ(dtable.item(1 * 130 + 5), 0.0);  // untouched row
  // Same bits for one thread and many.
  Tensor a = Tensor::zeros({11, 130}, DType::f32), b = Tensor::zeros({11, 130}, DType::f32);
  const Tensor d32 = dout.to(DType::f32);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  embedding_backward(d32, ids, a);
  omp_set_num_threads(std::max(threads, 2));
  embedding_backward(d32, ids, b);
  omp_set_num_threads(threads);
  EXPECT_EQ(a.to_doubles(), b.to_doubles());
}

TEST(Embedding, OutOfVocabularyIdNamesTheToken) {
  const Tensor table = Tensor::zeros({5, 4}, DType::f32);
  const Tensor ids = Tensor::from_vector<int32_t>({1, 5}, {2});
  Tensor out = Tensor::empty({2, 4}, DType::f32);
  try {
    embedding_forward(table, ids, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amber
