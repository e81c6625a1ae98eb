// Which x86 vector ISA the JIT's generated C++ is compiled for, and the
// compiler flags that say so.
//
// The JIT builds on the machine that runs the code, so it may use the
// widest ISA the host has; the choice is explicit flags (not -march=native)
// so that it is part of the cache key: a cache directory shared by two
// hosts never hands an AVX-512 kernel to an AVX2-only machine.
//
// KILN_CPU_ISA=avx2|avx512 forces the level (avx2 is the floor, to test it on
// an AVX-512 host); unset, the JIT follows the eager kernels' choice
// (cpu_isa(), which honours KILN_CPU=avx2).
#pragma once
#include <string>
#include <vector>

namespace kiln::compiler::codegen {

enum class JitIsaLevel { Avx2, Avx512 };

struct JitIsa {
  JitIsaLevel level = JitIsaLevel::Avx2;
  bool avx512_bf16 = false;  // AVX-512 BF16 (vdpbf16ps, vcvtne2ps2bf16), only with level Avx512
  // "avx2", "avx512" or "avx512+bf16": what logs, docs and tests print.
  std::string name() const;
  // -m flags for g++ plus -D KILN_JIT_AVX512 / KILN_JIT_AVX512_BF16, so
  // generated code can pick intrinsics with #if when it must.
  std::vector<std::string> compiler_flags() const;
  // Vector width in floats the renderer should aim for: 16 (AVX-512) or 8.
  int float_lanes() const { return level == JitIsaLevel::Avx512 ? 16 : 8; }
};

// What the host CPU has, detected once (cpuid through __builtin_cpu_supports).
JitIsa host_max_isa();
// The ISA JIT code is built for now: KILN_CPU_ISA if set (an ISA the host
// lacks is a kiln::Error), else AVX-512 when the eager kernels use it, else AVX2.
JitIsa jit_isa();
// "avx2" / "avx512" -> the ISA for that level on this host (bf16 when the host has it);
// anything else, or avx512 on a host without it, is a kiln::Error.
JitIsa jit_isa_named(const std::string& name);

}  // namespace kiln::compiler::codegen
