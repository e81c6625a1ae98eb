// max-autotune's memory for convolutions: which oneDNN algorithm each float32
// convolution kind and shape runs fastest with on this machine, measured once
// and kept on disk beside the compiled kernels.
//
// oneDNN's convolution_auto picks Winograd for every 3x3 stride-1 layer on
// AVX-512, and eager kiln runs what it picks. Measured per layer (docs/results.md,
// "max-autotune"), the direct algorithm is faster on some: a 3-channel input
// layer (37 against 7 ms forward on ResNet-18's first), airbench's 3x3-pixel
// layer, the 24-channel layers' backward passes. No rule of thumb fits, so the
// compiler's max-autotune mode marks its convolutions algorithm="tuned"
// (compiler/passes/autotune_convolutions.h) and conv2d times both algorithms on
// the first call of each kind and shape, in place in the running step, on its
// real operands and with the reorders each algorithm needs: not an isolated
// micro-benchmark, whose winner can lose in the real step (pytorch #148502).
//
// The same table keeps the bfloat16-or-float32 choice conv2d times per layer
// under autocast (ops/conv.cpp, KILN_CONV_BF16=auto) and matmul per shape
// (ops/matmul.cpp, KILN_MATMUL_BF16=auto; keys "mm_bf16:..."), so a warm
// start on this machine times none of them.
//
// The table lives in <cache root>/autotune-v1/conv.tsv (core/cache_root.h),
// one line per choice: "<machine> <kind and shape>\t<choice>". The
// machine part names the CPU, oneDNN's ISA, the thread count and oneDNN's
// version, since a choice measured under one of them says nothing about
// another; and the version of the rules a choice was measured against
// (kChoiceRules), since a choice between two candidates says nothing once one
// of them has changed. It is written atomically (core/atomic_file.h): a killed process
// leaves the old table or the new one. An unreadable line is ignored (it is
// measured again), an unwritable directory only costs the persistence.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace kiln::conv_autotune {

// The version of what choices are measured against. Bump it whenever a
// candidate changes (a new algorithm rule for float32 `auto`, a new fusion a
// measured layer runs with): the table's older lines then no longer match this
// machine and are measured again, instead of a stale winner being kept.
//   1 (keys without "|rules"): the table's first rules.
//   2: float32 `auto` runs the direct algorithm for few input channels
//      (ops/conv.cpp, small_input_algorithm): bfloat16 stems chosen against
//      float32 Winograd lose to float32 direct.
//   3: a bfloat16 layer is "bf16" among float32 layers only with a fifth's
//      margin (bf16_choice), and matrix products record "bf16-alone" too.
inline constexpr int kChoiceRules = 3;

// The machine part of this process's keys: CPU model, oneDNN ISA, threads,
// oneDNN version, kChoiceRules.
std::string machine_key();

// The choice recorded for `shape_key` on this machine ("auto" | "direct" for
// an algorithm, "bf16" | "bf16-alone" | "float32" for a bfloat16 layer's
// precision: ops/conv_fused.h), from
// memory or, on the first lookup of a process, from the on-disk table.
std::optional<std::string> lookup(const std::string& shape_key);
// Records a measured choice (one word) in memory and on disk.
void record(const std::string& shape_key, const std::string& choice);

// The choice to record for a bfloat16 layer (convolution or matrix product)
// whose bfloat16 kernel beat float32 between casts: "bf16" when the kernel
// plus the casts it needs among float32 values (`casts`) beats the float32
// layer on float32 values (`t_values`) by a fifth or more, else
// "bf16-alone" (the compiler's float32_regions runs it in float32 there).
// The margin is for what the timing does not see: a bfloat16 layer among
// float32 ones leaves the float32 graph's fused nChw16c path (its batch norm
// runs unfused on plain bfloat16), and a choice won by a hair flips with the
// machine's load. ResNet-18's 1x1 downsampling forward (bf16 4.7 ms + 2.3 ms
// of casts against 6.0 ms on float32 values; recorded "bf16" in one run)
// made its bf16 train step 0.91x and eval 0.89x of compiled float32.
constexpr double kBf16MarginAmongFloat32 = 0.8;
inline const char* bf16_choice(double t_bf16, double casts, double t_values) {
  return t_bf16 + casts <= kBf16MarginAmongFloat32 * t_values ? "bf16" : "bf16-alone";
}
// Records a bfloat16 layer's choice given by hand ("bf16", "bf16-alone" or
// "float32"; a kiln::Error naming `who` for any other word): tests of what
// the compiler does with each.
void record_bf16_choice(const std::string& shape_key, const std::string& choice, const char* who);

// <cache root>/autotune-v1/conv.tsv (a kiln::Error when there is no cache root).
std::filesystem::path table_path();
// The choices the on-disk table holds, for every machine (kiln cache --info).
int64_t table_entries();
// Deletes the table and forgets this process's choices (kiln cache --clear);
// whether there was a table.
bool clear();

struct Stats {
  int64_t measured = 0;  // choices timed by this process
  int64_t loaded = 0;    // choices read from the on-disk table
  std::string file;      // the table's path ("" before the first lookup)
};
Stats stats();
// Forgets the in-memory table and the counters (tests: the next lookup reads
// the disk again, as a new process would).
void reset_for_tests();

}  // namespace kiln::conv_autotune
