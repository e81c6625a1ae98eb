#include "core/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "kiln/error.h"

namespace kiln {
namespace {

struct Detected {
  bool avx2_fma = false;
  bool avx512 = false;  // F + BW + VL + DQ
  bool env_forces_avx2 = false;
};

const Detected& detected() {
  static const Detected d = [] {
    Detected r;
    __builtin_cpu_init();
    r.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    r.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (const char* env = std::getenv("KILN_CPU")) {
      std::string v = env;
      KILN_CHECK(v == "avx2" || v == "avx512" || v.empty(), "KILN_CPU=", v,
                 " is not a known instruction set; use KILN_CPU=avx2 (or avx512, or leave it unset)");
      r.env_forces_avx2 = v == "avx2";
    }
    return r;
  }();
  return d;
}

// -1: no override; otherwise a CpuIsa value.
std::atomic<int> g_override{-1};

}  // namespace

bool cpu_has_avx2() { return detected().avx2_fma; }

bool cpu_has_avx512() {
  int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<CpuIsa>(o) == CpuIsa::Avx512;
  const Detected& d = detected();
  return d.avx512 && !d.env_forces_avx2;
}

CpuIsa cpu_isa() { return cpu_has_avx512() ? CpuIsa::Avx512 : CpuIsa::Avx2; }

const char* cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::Avx512 ? "avx512" : "avx2"; }

void check_cpu_supported() {
  KILN_CHECK(cpu_has_avx2(), "this CPU lacks AVX2 and FMA, which every kiln kernel needs (an x86-64 CPU from 2013 "
             "or later: Intel Haswell / AMD Excavator); run kiln on such a machine");
}

void set_cpu_isa_override(CpuIsa isa) {
  KILN_CHECK(isa != CpuIsa::Avx512 || detected().avx512,
             "set_cpu_isa_override(avx512): this CPU lacks AVX-512 F/BW/VL/DQ; only avx2 can be forced here");
  g_override.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void clear_cpu_isa_override() { g_override.store(-1, std::memory_order_relaxed); }

}  // namespace kiln
