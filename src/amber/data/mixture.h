// Mixture weights for `amber tokenize`: each input source carries a weight, and every
// document of it is written that many times on average (2: twice, 0.5: about half of
// them), so the shards hold the mixture the run should see. Which documents a fractional
// weight keeps depends only on their text, like the validation split.
#pragma once

#include <string>
#include <string_view>

namespace amber::data {

struct CorpusInput {
  std::string path;   // a file or folder (corpus_files expands folders)
  double weight = 1;  // copies of each document, on average
};

// "PATH" or "PATH:WEIGHT". A path that exists is taken whole, so a file whose name holds
// a colon needs no weight; WEIGHT is a finite number in (0, 1000].
CorpusInput parse_corpus_input(std::string_view arg);

// How many times a document of text `text` from an input of `weight` is written: the
// whole part of the weight, plus one when a hash of the text falls under its fraction.
int mixture_copies(std::string_view text, double weight);

}  // namespace amber::data
