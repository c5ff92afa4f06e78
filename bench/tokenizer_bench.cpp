// Tokenizer encoding throughput: MB/s of UTF-8 text on one thread and on all threads,
// cold (fresh piece cache) and warm. Results and the command are in docs/perf/tokenizer.md.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <omp.h>

#include "amber/core/error.h"
#include "amber/data/corpus.h"
#include "amber/data/tokenizer_json.h"

namespace {

using amber::data::Tokenizer;

// Encodes every document `passes` times; returns MB/s of the fastest pass.
double measure(const Tokenizer& tokenizer, const std::vector<std::string>& docs, int64_t bytes, int threads,
               int passes, int64_t* tokens) {
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    int64_t count = 0;
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64) reduction(+ : count)
    for (size_t d = 0; d < docs.size(); ++d) count += static_cast<int64_t>(tokenizer.encode(docs[d]).size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / 1e6 / s);
    *tokens = count;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER.json [CORPUS FILES OR FOLDERS...]\n"
                         "  corpus defaults to %s\n", amber::data::kDefaultCorpus);
    return 2;
  }
  try {
    std::vector<std::string> inputs(argv + 2, argv + argc);
    if (inputs.empty()) inputs.push_back(amber::data::kDefaultCorpus);
    std::vector<std::string> docs;
    const auto stats = amber::data::read_corpus(amber::data::corpus_files(inputs), {},
                                                [&](std::string&& d) { docs.push_back(std::move(d)); });
    const int all = omp_get_max_threads();
    std::printf("tokenizer %s: %lld documents, %.2f MB\n", argv[1], static_cast<long long>(stats.documents),
                stats.bytes / 1e6);
    for (int threads : {1, all}) {
      // A fresh Tokenizer starts with empty per-thread piece caches.
      const Tokenizer tokenizer = amber::data::load_tokenizer_json(argv[1]);
      int64_t tokens = 0;
      const double cold = measure(tokenizer, docs, stats.bytes, threads, 1, &tokens);
      const double warm = measure(tokenizer, docs, stats.bytes, threads, 10, &tokens);
      std::printf("threads %2d: cold %7.2f MB/s, warm %7.2f MB/s (%lld tokens, %.2f bytes/token)\n", threads, cold,
                  warm, static_cast<long long>(tokens), static_cast<double>(stats.bytes) / tokens);
    }
  } catch (const amber::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
