#include "kiln/random.h"

#include "ops/philox.h"

namespace kiln {

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

// Philox-4x32 with 10 rounds: one definition with the CUDA kernels' (ops/philox.h).
Philox4 philox(uint64_t seed, uint64_t counter) {
  Philox4 r;
  philox_words(seed, counter, r.v);
  return r;
}

}  // namespace kiln
