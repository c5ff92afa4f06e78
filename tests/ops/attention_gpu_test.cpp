// CUDA attention against the CPU oracle: forward and every gradient on fresh Philox
// inputs, each compared with the CPU op on the same rounded inputs and with a float64
// CPU run, over document edges, GQA/MQA, windows, sinks, NaN-poisoned outputs and repeats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "amber/ops/attention.h"
#include "amber/ops/rope.h"
#include "ops/testing.h"

namespace amber {
namespace {

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

struct Case {
  const char* name;
  std::vector<int32_t> lengths;
  int64_t heads, kv_heads, dim;
  int window;
  bool sinks;
};

// Lengths on both sides of the kernels' 64-row tiles and 32-key steps.
const std::vector<int32_t> kEdges = {1, 127, 128, 129};

// Far more work items (tiles x heads) than a GPU has blocks at once, so a persistent
// block takes many tiles one after another: `short_documents` of 1-60 tokens with a
// 600-token document (several tiles of several stages) after every hundredth.
std::vector<int32_t> many_documents(int short_documents) {
  std::vector<int32_t> lengths;
  for (int i = 0; i < short_documents; ++i) {
    lengths.push_back(1 + (i * 37) % 60);
    if (i % 100 == 99) lengths.push_back(600);
  }
  return lengths;
}

// Random lengths from the Philox stream (1 .. 200) plus one document of many tiles.
std::vector<int32_t> mixed_lengths(uint64_t seed) {
  const std::vector<double> r = testing::random_tensor({6}, DType::f64, seed).to_doubles();
  std::vector<int32_t> lengths;
  for (double x : r) lengths.push_back(1 + static_cast<int32_t>(std::fabs(x) * 997.0) % 200);
  lengths.insert(lengths.begin() + 2, 700);
  return lengths;
}

// One problem in one dtype, on the CPU. sinks (f32 beside narrow activations, as a
// master copy) and dsinks0 (the gradient dsinks accumulates into) undefined without sinks.
struct Inputs {
  SeqInfo seq;
  AttentionOptions options;
  Tensor q, k, v, dout, sinks, dsinks0;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  in.seq = SeqInfo::from_lengths(c.lengths);
  const int64_t t = in.seq.total_tokens;
  in.options.window = c.window;  // scale 0: head_dim^-0.5, resolved by the entry point
  // A wider q makes the softmax peaked, so the online rescaling matters.
  in.q = testing::random_tensor({t, c.heads, c.dim}, DType::f64, seed, 1.5f);
  in.k = testing::random_tensor({t, c.kv_heads, c.dim}, DType::f64, seed + 1);
  in.v = testing::random_tensor({t, c.kv_heads, c.dim}, DType::f64, seed + 2);
  in.dout = testing::random_tensor({t, c.heads, c.dim}, DType::f64, seed + 3);
  if (c.sinks) {
    in.sinks = testing::random_tensor({c.heads}, DType::f64, seed + 4);
    in.dsinks0 = testing::random_tensor({c.heads}, DType::f64, seed + 5);
  }
  return in;
}

Inputs cast(const Inputs& in, DType dtype) {
  Inputs out = in;
  out.q = in.q.to(dtype);
  out.k = in.k.to(dtype);
  out.v = in.v.to(dtype);
  out.dout = in.dout.to(dtype);
  const DType side = dtype == DType::f64 ? DType::f64 : DType::f32;
  if (in.sinks.defined()) {
    out.sinks = in.sinks.to(side);
    out.dsinks0 = in.dsinks0.to(side);
  }
  return out;
}

// Every result of one forward + backward, copied back to the CPU; dsinks holds the
// increment over dsinks0.
struct Results {
  Tensor out, lse, dq, dk, dv, dsinks;
};

// On `seq`, a layout already on `device` (cpu_in.seq only gives the tensors' sizes).
Results run_on(const SeqInfo& seq, const Inputs& cpu_in, Device device) {
  const auto on = [&](const Tensor& t) { return t.defined() ? t.to(device) : Tensor(); };
  // GPU outputs start as NaN, so an element the kernels skip cannot pass.
  const auto output = [&](const Shape& shape, DType dtype) {
    return device.is_cuda() ? Tensor::full(shape, NAN, dtype).to(device) : Tensor::empty(shape, dtype);
  };
  const Tensor q = on(cpu_in.q), k = on(cpu_in.k), v = on(cpu_in.v), dout = on(cpu_in.dout);
  const Tensor sinks = on(cpu_in.sinks);
  const DType dt = q.dtype(), stat = dt == DType::f64 ? DType::f64 : DType::f32;
  const int64_t tokens = q.size(0), heads = q.size(1);
  Tensor out = output(q.shape(), dt), lse = output({tokens, heads}, stat);
  attention_forward(q, k, v, seq, cpu_in.options, sinks, out, lse);
  Tensor dq = output(q.shape(), dt), dk = output(k.shape(), dt), dv = output(v.shape(), dt);
  Tensor dsinks = sinks.defined() ? cpu_in.dsinks0.clone().to(device) : Tensor();
  attention_backward(dout, q, k, v, out, lse, seq, cpu_in.options, sinks, dq, dk, dv, dsinks);
  Results r{out.to(Device::cpu()), lse.to(Device::cpu()), dq.to(Device::cpu()),
            dk.to(Device::cpu()), dv.to(Device::cpu()), Tensor()};
  if (sinks.defined()) {
    const std::vector<double> after = dsinks.to(Device::cpu()).to_doubles();
    const std::vector<double> before = cpu_in.dsinks0.to_doubles();
    std::vector<double> inc(after.size());
    for (size_t i = 0; i < after.size(); ++i) inc[i] = after[i] - before[i];
    r.dsinks = Tensor::from_vector(inc, {heads});
  }
  return r;
}

Results run(const Inputs& cpu_in, Device device) { return run_on(cpu_in.seq.to(device), cpu_in, device); }

void expect_identical(const std::string& what, const Tensor& a, const Tensor& b) {
  if (!a.defined()) return;
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  ASSERT_EQ(x.size(), y.size());
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += !(x[i] == y[i]) && !(std::isnan(x[i]) && std::isnan(y[i]));
  EXPECT_EQ(differ, 0) << what << ": two GPU runs differ in " << differ << " elements";
}

// Judges one result. Outputs rounded to the narrow dtype must stay under 1e-2 from
// float64 and within 1.5x of the CPU op's own error (both round once; the GPU may not add
// more). f32 outputs (every f32 run, lse and dsinks always) must stay under 1e-5 / 1e-2.
void judge(const std::string& what, DType dt, bool narrow_output, const Tensor& gpu,
           const Tensor& cpu, const Tensor& ref) {
  const double gpu_cpu = testing::relative_error(gpu, cpu);
  const double gpu_ref = testing::relative_error(gpu, ref);
  const double cpu_ref = testing::relative_error(cpu, ref);
  std::printf("attention gpu %-34s %-4s vs cpu %.2e  vs f64 %.2e  (cpu vs f64 %.2e)\n",
              what.c_str(), std::string(dtype_name(dt)).c_str(), gpu_cpu, gpu_ref, cpu_ref);
  ASSERT_TRUE(std::isfinite(gpu_ref)) << what << ": NaN or infinity in the GPU result";
  if (dt == DType::f32) {
    EXPECT_LT(gpu_ref, 1e-5) << what;
    EXPECT_LT(gpu_cpu, 1e-5) << what;
  } else if (narrow_output) {
    EXPECT_LT(gpu_ref, 1e-2) << what;
    EXPECT_LE(gpu_ref, 1.5 * cpu_ref) << what;
  } else {
    // lse keeps f32 accuracy; dsinks sums over the narrow out through delta.
    EXPECT_LT(gpu_ref, what.find("lse") != std::string::npos ? 1e-5 : 1e-2) << what;
  }
}

// Each dtype on the fastest kernels for this card and, for bf16/f16, again on the
// portable mma.sync kernels (the same on a card without the Hopper path).
void check_case(const Case& c, uint64_t seed) {
  const Inputs wide = make_inputs(c, seed);
  for (const auto& [dt, portable] : {std::pair{DType::f32, false}, {DType::bf16, false}, {DType::bf16, true},
                                     {DType::f16, false}, {DType::f16, true}}) {
    SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + (portable ? " portable" : ""));
    Inputs in = cast(wide, dt);
    in.options.portable_kernels = portable;
    const Results ref = run(cast(in, DType::f64), Device::cpu());  // the rounded inputs, in f64
    const Results cpu = run(in, Device::cpu());
    const Results gpu = run(in, Device::cuda());
    const bool narrow = dt != DType::f32;
    judge(std::string(c.name) + " out", dt, narrow, gpu.out, cpu.out, ref.out);
    judge(std::string(c.name) + " lse", dt, false, gpu.lse, cpu.lse, ref.lse);
    judge(std::string(c.name) + " dq", dt, narrow, gpu.dq, cpu.dq, ref.dq);
    judge(std::string(c.name) + " dk", dt, narrow, gpu.dk, cpu.dk, ref.dk);
    judge(std::string(c.name) + " dv", dt, narrow, gpu.dv, cpu.dv, ref.dv);
    if (c.sinks) judge(std::string(c.name) + " dsinks", dt, false, gpu.dsinks, cpu.dsinks, ref.dsinks);
    // No atomics anywhere: a second run gives the same bits.
    const Results again = run(in, Device::cuda());
    expect_identical("out", gpu.out, again.out);
    expect_identical("lse", gpu.lse, again.lse);
    expect_identical("dq", gpu.dq, again.dq);
    expect_identical("dk", gpu.dk, again.dk);
    expect_identical("dv", gpu.dv, again.dv);
    expect_identical("dsinks", gpu.dsinks, again.dsinks);
  }
}

TEST(AttentionGpu, MhaHeadDim64DocumentEdges) {
  REQUIRE_GPU();
  check_case({"mha 4/4 d64 edges", kEdges, 4, 4, 64, 0, false}, 1000);
}

TEST(AttentionGpu, GqaHeadDim128SinksDocumentEdges) {
  REQUIRE_GPU();
  check_case({"gqa 8/2 d128 sinks edges", kEdges, 8, 2, 128, 0, true}, 1100);
}

TEST(AttentionGpu, MqaWindowSinksDocumentEdges) {
  REQUIRE_GPU();
  check_case({"mqa 4/1 d64 w100 sinks edges", kEdges, 4, 1, 64, 100, true}, 1200);
}

TEST(AttentionGpu, GqaHeadDim128WindowMixedLengths) {
  REQUIRE_GPU();
  check_case({"gqa 8/2 d128 w37 mixed", mixed_lengths(1300), 8, 2, 128, 37, false}, 1310);
}

TEST(AttentionGpu, GqaHeadDim64WindowSinksMixedLengths) {
  REQUIRE_GPU();
  check_case({"gqa 4/2 d64 w200 sinks mixed", mixed_lengths(1400), 4, 2, 64, 200, true}, 1410);
}

// Group 4: the backward takes a document's last 5 key tiles with all four query heads
// of a KV head in one work item, and the 700-token document's first tile head by head
// (ordered dK/dV sums), so both kinds of item meet in one document's dQ sums.
TEST(AttentionGpu, GqaHeadDim64GroupedAndPerHeadWorkItems) {
  REQUIRE_GPU();
  check_case({"gqa 8/2 d64 mixed", mixed_lengths(1800), 8, 2, 64, 0, false}, 1810);
}

// At head_dim 64 the last three quarters of a long document's key tiles (at most 16) are
// grouped too: 8 of the 1300-token document's 11 tiles at group 4 (20 pairs alone would
// group 5), and 16 of the 3000-token document's 24 at group 2 (the cap; 20 pairs: 10).
TEST(AttentionGpu, GqaHeadDim64LongDocumentsGroupThreeQuarters) {
  REQUIRE_GPU();
  check_case({"gqa 8/2 d64 long documents", {1300, 37, 700, 1}, 8, 2, 64, 0, false}, 1820);
  check_case({"gqa 4/2 d64 past the cap", {3000, 129}, 4, 2, 64, 0, false}, 1830);
}

TEST(AttentionGpu, ManyDocumentsOutnumberThePersistentBlocks) {
  REQUIRE_GPU();
  check_case({"gqa 4/2 d64 many documents", many_documents(300), 4, 2, 64, 0, false}, 1600);
  check_case({"gqa 4/2 d128 w90 many documents", many_documents(300), 4, 2, 128, 90, false}, 1610);
}

// Documents shorter than a tile share one (the Hopper forward packs consecutive ones
// into fewer than 192 query rows at head_dim 64, 128 at 128, where documents average
// less than a tile, as here): packs of two to a dozen documents, single tokens between
// them, lengths at and around the tile sizes, and more documents than one planning
// thread packs (16), so a run's end splits a pack.
std::vector<int32_t> packable_lengths() {
  const std::vector<int32_t> run = {30, 40, 50, 64, 1, 1, 1, 120, 8, 191, 2, 192, 1, 129, 63, 65, 1, 300, 17, 100, 28};
  std::vector<int32_t> lengths;
  for (int i = 0; i < 3; ++i) lengths.insert(lengths.end(), run.begin() + i, run.end());
  return lengths;
}

TEST(AttentionGpu, ShortDocumentsPackedIntoSharedTiles) {
  REQUIRE_GPU();
  check_case({"gqa 4/2 d64 sinks packed", packable_lengths(), 4, 2, 64, 0, true}, 1900);
  check_case({"mha 4/4 d64 w30 packed", packable_lengths(), 4, 4, 64, 30, false}, 1910);
  check_case({"gqa 8/2 d128 packed", packable_lengths(), 8, 2, 128, 0, false}, 1920);
  check_case({"mha 4/4 d128 w50 sinks packed", packable_lengths(), 4, 4, 128, 50, true}, 1930);
}

// head_dim 32 is what the small model presets (dim 128, 4 heads) run on the GPU.
TEST(AttentionGpu, MhaHeadDim32SinksMixedLengths) {
  REQUIRE_GPU();
  check_case({"mha 4/4 d32 sinks mixed", mixed_lengths(1500), 4, 4, 32, 0, true}, 1510);
}

TEST(AttentionGpu, UnsupportedShapesNameTheShape) {
  REQUIRE_GPU();
  const Inputs in = cast(make_inputs({"d16", {5, 3}, 2, 2, 16, 0, false}, 1600), DType::bf16);
  const SeqInfo seq = in.seq.to(Device::cuda());
  Tensor out = Tensor::empty(in.q.shape(), DType::bf16, Device::cuda());
  Tensor lse = Tensor::empty({8, 2}, DType::f32, Device::cuda());
  const Tensor q = in.q.to(Device::cuda()), k = in.k.to(Device::cuda()), v = in.v.to(Device::cuda());
  try {
    attention_forward(q, k, v, seq, in.options, Tensor(), out, lse);
    ADD_FAILURE() << "head_dim 16 ran on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[8, 2, 16]"), std::string::npos) << e.what();
  }
  try {
    attention_forward(q, k, v, in.seq, in.options, Tensor(), out, lse);  // host cu_seqlens
    ADD_FAILURE() << "a CPU SeqInfo was accepted for GPU tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cu_seqlens"), std::string::npos) << e.what();
  }
}

// Training-like shapes (bf16): the backward of a large batch repeats bit for bit. At
// head_dim 64 the Hopper path adds each key tile's dQ into a shared sum in a fixed
// order across blocks, which these shapes exercise with many tiles per document (speed
// is measured by `amber bench kernel attention`).
void expect_backward_repeats(const Case& c, uint64_t seed) {
  const Inputs in = cast(make_inputs(c, seed), DType::bf16);
  const SeqInfo seq = in.seq.to(Device::cuda());
  const Tensor q = in.q.to(Device::cuda()), k = in.k.to(Device::cuda()), v = in.v.to(Device::cuda());
  const Tensor dout = in.dout.to(Device::cuda());
  Tensor out = Tensor::empty(q.shape(), DType::bf16, Device::cuda());
  Tensor lse = Tensor::empty({q.size(0), c.heads}, DType::f32, Device::cuda());
  Tensor dq = Tensor::empty(q.shape(), DType::bf16, Device::cuda());
  Tensor dk = Tensor::empty(k.shape(), DType::bf16, Device::cuda());
  Tensor dv = Tensor::empty(v.shape(), DType::bf16, Device::cuda());
  Tensor none;
  attention_forward(q, k, v, seq, in.options, none, out, lse);
  const auto backward = [&] {
    attention_backward(dout, q, k, v, out, lse, seq, in.options, none, dq, dk, dv, none);
    return Results{Tensor(), Tensor(), dq.to(Device::cpu()), dk.to(Device::cpu()), dv.to(Device::cpu()), Tensor()};
  };
  const Results first = backward(), second = backward();
  expect_identical(std::string(c.name) + " dq", first.dq, second.dq);
  expect_identical(std::string(c.name) + " dk", first.dk, second.dk);
  expect_identical(std::string(c.name) + " dv", first.dv, second.dv);
  // relative_error is +inf when any element is NaN.
  EXPECT_TRUE(std::isfinite(testing::relative_error(first.dq, first.dq))) << "NaN in dq of " << c.name;
}

void expect_same_results(const std::string& what, const Results& a, const Results& b) {
  expect_identical(what + " out", a.out, b.out);
  expect_identical(what + " lse", a.lse, b.lse);
  expect_identical(what + " dq", a.dq, b.dq);
  expect_identical(what + " dk", a.dk, b.dk);
  expect_identical(what + " dv", a.dv, b.dv);
}

// The trainer's pattern: one layout's device buffers refilled in place for every step,
// each step's model working on a copy whose layers share its tile plans and work lists
// (SeqInfo::derived). A step must never run on the plans of the documents before.
TEST(AttentionGpu, EachStepPlansItsOwnDocuments) {
  REQUIRE_GPU();
  const Case first{"step 1", {300, 40, 600, 84, 1}, 12, 2, 64, 0, false};
  const Case second{"step 2", {50, 500, 70, 404, 1}, 12, 2, 64, 0, false};  // same tokens and count
  const Inputs a = cast(make_inputs(first, 1800), DType::bf16), b = cast(make_inputs(second, 1801), DType::bf16);
  SeqInfo slot = a.seq.to(Device::cuda());

  const SeqInfo step1 = slot;
  const Results once = run_on(step1, a, Device::cuda()), again = run_on(step1, a, Device::cuda());
  expect_same_results("a second layer on the kept plans", once, again);

  slot.cu_seqlens.copy_from(b.seq.cu_seqlens);
  slot.cu_seqlens_host = b.seq.cu_seqlens_host;
  slot.positions.copy_from(b.seq.positions);
  const SeqInfo step2 = slot;
  expect_same_results("the refilled layout", run_on(step2, b, Device::cuda()), run(b, Device::cuda()));
}

// The packing rule of attention.cu's pack_documents, on the host: a document of `rows`
// tokens or more is a segment of its own; consecutive shorter ones share a segment
// while their lengths sum to less than rows, next fit within runs of 16 documents (more
// when there are over 16 x 1024), so a run's end also ends a segment. Segment starts,
// then the token count for every entry up to num_docs.
std::vector<int32_t> packed_segments(const std::vector<int32_t>& cu, int rows) {
  const int docs = static_cast<int>(cu.size()) - 1;
  const int run = std::max(16, (docs + 1023) / 1024);
  std::vector<int32_t> segments;
  for (int lo = 0; lo < docs; lo += run)
    for (int d = lo, fill = rows; d < std::min(docs, lo + run); ++d) {
      const int length = cu[d + 1] - cu[d];
      if (fill + length < rows) {
        fill += length;
      } else {
        segments.push_back(cu[d]);
        fill = std::min(length, rows);
      }
    }
  segments.resize(docs + 1, cu.back());
  return segments;
}

// The plan the Hopper forward (192-row tiles at head_dim 64) keeps in the layout's
// derived tensors, checked against packed_segments: the tile slots ((segment, tile) in
// order, then (-1, 0)), each short document's start for each of its tokens, and the
// segments. False when the forward was not the Hopper one (other GPUs run unpacked
// kernels), which plans no 192-row tiles.
constexpr int kHopperForwardRows = 192;
const std::string kPlanKey = "attention tile plan: rows " + std::to_string(kHopperForwardRows);

bool expect_packed_by_rule(const std::vector<int32_t>& lengths, uint64_t seed) {
  constexpr int kRows = kHopperForwardRows;
  const Inputs in = cast(make_inputs({"packed plan", lengths, 12, 2, 64, 0, false}, seed), DType::bf16);
  const SeqInfo seq = in.seq.to(Device::cuda());
  run_on(seq, in, Device::cuda());
  const Tensor* packed = seq.derived.find(kPlanKey + ", packed");
  EXPECT_EQ(seq.derived.find(kPlanKey), nullptr) << "the Hopper forward left short documents unpacked";
  if (!packed) return false;
  const std::vector<int32_t>& cu = in.seq.cu_seqlens_host;
  const int docs = in.seq.num_docs;
  const int64_t tokens = in.seq.total_tokens, slots = (tokens + kRows - 1) / kRows + docs;
  EXPECT_LT(tokens, int64_t{kRows} * docs);
  const std::vector<double> words = packed->to(Device::cpu()).to_doubles();
  EXPECT_EQ(static_cast<int64_t>(words.size()), 2 * slots + tokens + docs + 1);
  if (static_cast<int64_t>(words.size()) != 2 * slots + tokens + docs + 1) return true;
  const std::vector<int32_t> want = packed_segments(cu, kRows);
  EXPECT_EQ(std::vector<int32_t>(words.end() - (docs + 1), words.end()), want);
  const auto segments = std::count_if(want.begin(), want.end() - 1, [&](int32_t s) { return s < tokens; });
  std::printf("%d documents, %lld tokens: %lld segments of at most %d rows\n", docs, static_cast<long long>(tokens),
              static_cast<long long>(segments), kRows);
  EXPECT_LT(segments, docs / 2);  // short documents share tiles
  int64_t slot = 0;
  for (int s = 0; s < docs; ++s)
    for (int k = 0; k < (want[s + 1] - want[s] + kRows - 1) / kRows; ++k, ++slot) {
      EXPECT_EQ(words[2 * slot], s) << "slot " << slot;
      EXPECT_EQ(words[2 * slot + 1], k) << "slot " << slot;
    }
  for (; slot < slots; ++slot) EXPECT_EQ(words[2 * slot], -1) << "slot " << slot;
  for (int d = 0; d < docs; ++d) {
    if (cu[d + 1] - cu[d] >= kRows) continue;
    for (int t = cu[d]; t < cu[d + 1]; ++t) EXPECT_EQ(words[2 * slots + t], cu[d]) << "token " << t;
  }
  return true;
}

// Short documents are packed into shared forward tiles where the layout averages under
// a tile per document, by the rule, and only there.
TEST(AttentionGpu, ShortDocumentsPackByTheRule) {
  REQUIRE_GPU();
  const bool hopper = expect_packed_by_rule(packable_lengths(), 1940);
  if (!hopper) GTEST_SKIP() << "not the Hopper forward (sm_90 only): nothing is packed";
  expect_packed_by_rule(many_documents(300), 1941);
  // 50-600-token documents average more than a tile each: planned unpacked.
  const Inputs in = cast(make_inputs({"50-600", {300, 40, 600, 84, 512, 577, 350, 230}, 12, 2, 64, 0, false}, 1942),
                         DType::bf16);
  const SeqInfo seq = in.seq.to(Device::cuda());
  run_on(seq, in, Device::cuda());
  EXPECT_NE(seq.derived.find(kPlanKey), nullptr);
  EXPECT_EQ(seq.derived.find(kPlanKey + ", packed"), nullptr);
}

TEST(AttentionGpu, BackwardRepeatsAtTrainingShapes) {
  REQUIRE_GPU();
  expect_backward_repeats({"4 x 2048 16/4 d128", std::vector<int32_t>(4, 2048), 16, 4, 128, 0, false}, 1700);
  expect_backward_repeats({"4 x 2048 16/4 d64", std::vector<int32_t>(4, 2048), 16, 4, 64, 0, false}, 1701);
  expect_backward_repeats({"2 x 4096 8/8 d64 window 700", std::vector<int32_t>(2, 4096), 8, 8, 64, 700, false}, 1702);
  expect_backward_repeats({"mixed 12/4 d64", mixed_lengths(8000), 12, 4, 64, 0, false}, 1703);
}

// What a layer with QK-norm and RoPE runs: q and k normalised and rotated from a stacked
// projection, the attention, then its backward with the QK-norm + RoPE backward inside
// (QkNormRopeGrad). Returns the stacked gradient (q's and k's heads; v's left as they
// were) and the two gains' gradients (+= onto random starts).
struct QkResults {
  Tensor stack, dwq, dwk;
};

QkResults run_with_qk_norm_rope(const Case& c, DType dt, bool portable, Device device, uint64_t seed) {
  const auto on = [&](const Tensor& t) { return t.to(device); };
  const SeqInfo cpu_seq = SeqInfo::from_lengths(c.lengths);
  const SeqInfo seq = cpu_seq.to(device);
  const int64_t t = cpu_seq.total_tokens, stacked = c.heads + 2 * c.kv_heads;
  RopeConfig config;
  config.head_dim = static_cast<int>(c.dim);
  const RopeTable table(config);
  const Tensor x = on(testing::random_tensor({t, stacked, c.dim}, DType::f64, seed, 2.0f).to(dt));
  const Tensor q_raw = x.slice(1, 0, c.heads), k_raw = x.slice(1, c.heads, c.heads + c.kv_heads);
  const Tensor v = on(testing::random_tensor({t, c.kv_heads, c.dim}, DType::f64, seed + 1).to(dt));
  const Tensor dout = on(testing::random_tensor({t, c.heads, c.dim}, DType::f64, seed + 2).to(dt));
  const Tensor wq = on(testing::random_tensor({c.dim}, DType::f64, seed + 3, 0.2f, 1.0f).to(dt));
  const Tensor wk = on(testing::random_tensor({c.dim}, DType::f64, seed + 4, 0.2f, 1.0f).to(dt));
  const DType stat = dt == DType::f64 ? DType::f64 : DType::f32;
  const auto output = [&](const Shape& shape, DType dtype) {
    return device.is_cuda() ? Tensor::full(shape, NAN, dtype).to(device) : Tensor::empty(shape, dtype);
  };
  QkNormRopeForward qf{q_raw, wq, 1e-6, output(q_raw.shape(), dt), output({t * c.heads}, stat)};
  QkNormRopeForward kf{k_raw, wk, 1e-6, output(k_raw.shape(), dt), output({t * c.kv_heads}, stat)};
  qk_norm_rope_forward(qf, kf, seq.positions, table);
  AttentionOptions options;
  options.window = c.window;
  options.portable_kernels = portable;
  Tensor out = output(qf.y.shape(), dt), lse = output({t, c.heads}, stat), none;
  attention_forward(qf.y, kf.y, v, seq, options, none, out, lse);
  QkResults r{on(testing::random_tensor({t, stacked, c.dim}, DType::f64, seed + 5).to(dt)),
              on(testing::random_tensor({c.dim}, DType::f64, seed + 6).to(stat)),
              on(testing::random_tensor({c.dim}, DType::f64, seed + 7).to(stat))};
  const QkNormRopeGrad then{{Tensor(), q_raw, wq, qf.rstd, r.stack.slice(1, 0, c.heads), r.dwq},
                            {Tensor(), k_raw, wk, kf.rstd, r.stack.slice(1, c.heads, c.heads + c.kv_heads), r.dwk},
                            seq.positions,
                            &table};
  Tensor dq = output(qf.y.shape(), dt), dk = output(kf.y.shape(), dt), dv = output(v.shape(), dt);
  attention_backward(dout, qf.y, kf.y, v, out, lse, seq, options, none, dq, dk, dv, none, &then);
  return {r.stack.to(Device::cpu()), r.dwq.to(Device::cpu()), r.dwk.to(Device::cpu())};
}

// The QK-norm + RoPE backward inside the attention's: on the Hopper path at head_dim 64
// it reads dQ's f32 sum (dq itself is never written), elsewhere it runs after the
// attention on the bf16 dq. Against the same layer on the CPU in float64 and in the
// narrow dtype; two GPU runs give the same bits.
TEST(AttentionGpu, QkNormRopeBackwardInsideTheAttentions) {
  REQUIRE_GPU();
  std::vector<int32_t> lengths = mixed_lengths(8100);
  lengths.insert(lengths.end(), kEdges.begin(), kEdges.end());
  for (const Case& c : {Case{"qk-norm gqa 6/2 d64", lengths, 6, 2, 64, 0, false},
                        Case{"qk-norm mha 4/4 d64 window 100", lengths, 4, 4, 64, 100, false},
                        Case{"qk-norm gqa 4/2 d128", lengths, 4, 2, 128, 0, false}}) {
    for (const auto& [dt, portable] : {std::pair{DType::bf16, false}, {DType::bf16, true}, {DType::f16, false},
                                       {DType::f32, false}}) {
      const std::string what = std::string(c.name) + (portable ? " portable" : "");
      SCOPED_TRACE(what + " " + std::string(dtype_name(dt)));
      const QkResults ref = run_with_qk_norm_rope(c, DType::f64, false, Device::cpu(), 8200);
      const QkResults cpu = run_with_qk_norm_rope(c, dt, false, Device::cpu(), 8200);
      const QkResults gpu = run_with_qk_norm_rope(c, dt, portable, Device::cuda(), 8200);
      judge(what + " d(qkv stack)", dt, dt != DType::f32, gpu.stack, cpu.stack, ref.stack);
      judge(what + " q gain grad", dt, false, gpu.dwq, cpu.dwq, ref.dwq);
      judge(what + " k gain grad", dt, false, gpu.dwk, cpu.dwk, ref.dwk);
      const QkResults again = run_with_qk_norm_rope(c, dt, portable, Device::cuda(), 8200);
      expect_identical(what + " d(qkv stack)", gpu.stack, again.stack);
      expect_identical(what + " q gain grad", gpu.dwq, again.dwq);
      expect_identical(what + " k gain grad", gpu.dwk, again.dwk);
    }
  }
}

}  // namespace
}  // namespace amber
