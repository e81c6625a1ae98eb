#include "compiler/codegen/cpp/host_isa.h"

#include <cstdlib>

#include "core/cpu_features.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {

std::string JitIsa::name() const {
  if (level == JitIsaLevel::Avx2) return "avx2";
  return avx512_bf16 ? "avx512+bf16" : "avx512";
}

std::vector<std::string> JitIsa::compiler_flags() const {
  // AVX2 + FMA + F16C is the floor every kiln build assumes (CMakeLists.txt's KILN_BASE_FLAGS).
  std::vector<std::string> f = {"-mavx2", "-mfma", "-mf16c"};
  if (level == JitIsaLevel::Avx512) {
    for (const char* m : {"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-DKILN_JIT_AVX512=1"}) f.push_back(m);
    // GCC's generic tuning prefers 256-bit vectors even with AVX-512 enabled;
    // the kernels we generate are streaming loops where 512 bits pay.
    f.push_back("-mprefer-vector-width=512");
    if (avx512_bf16) {
      f.push_back("-mavx512bf16");
      f.push_back("-DKILN_JIT_AVX512_BF16=1");
    }
  }
  return f;
}

JitIsa host_max_isa() {
  static const JitIsa isa = [] {
    JitIsa r;
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (avx512) {
      r.level = JitIsaLevel::Avx512;
      r.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
    }
    return r;
  }();
  return isa;
}

JitIsa jit_isa_named(const std::string& name) {
  JitIsa host = host_max_isa();
  if (name == "avx2") return JitIsa{};
  if (name == "avx512") {
    KILN_CHECK(host.level == JitIsaLevel::Avx512, "KILN_CPU_ISA=avx512: this CPU lacks AVX-512 (F, BW, VL, DQ); "
               "use KILN_CPU_ISA=avx2 or leave it unset");
    return host;
  }
  KILN_FAIL("KILN_CPU_ISA=", name, " is not a known instruction set; use avx2 or avx512 (or leave it unset)");
}

JitIsa jit_isa() {
  if (const char* env = std::getenv("KILN_CPU_ISA"); env && *env) return jit_isa_named(env);
  return cpu_isa() == CpuIsa::Avx512 ? host_max_isa() : JitIsa{};
}

}  // namespace kiln::compiler::codegen
