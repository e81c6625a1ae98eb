// Which x86 vector instruction sets kernels may use, detected once at run time.
//
// Every kiln build is compiled for AVX2 + FMA (the floor); files named
// *_avx512.cpp hold AVX-512 variants that run only when cpu_has_avx512()
// says so. KILN_CPU=avx2 in the environment forces the AVX2 kernels on an
// AVX-512 machine (to compare both paths or to reproduce a result);
// set_cpu_isa_override() does the same from a test.
#pragma once

namespace kiln {

enum class CpuIsa { Avx2, Avx512 };

// True when AVX-512 kernels may run: the CPU has AVX-512 F, BW, VL and DQ and
// neither KILN_CPU=avx2 nor an override asks for AVX2.
bool cpu_has_avx512();
// True when the CPU has AVX2 and FMA (always true where kiln runs at all).
bool cpu_has_avx2();
// The instruction set kernels use now.
CpuIsa cpu_isa();
const char* cpu_isa_name(CpuIsa isa);  // "avx2", "avx512"

// Throws kiln::Error when the CPU lacks AVX2 or FMA, which every kiln kernel
// assumes. Called when the ops table is first used.
void check_cpu_supported();

// Test hook: forces the kernels' instruction set (Avx512 on a CPU without it
// throws kiln::Error). clear_cpu_isa_override() goes back to detection + KILN_CPU.
void set_cpu_isa_override(CpuIsa isa);
void clear_cpu_isa_override();

}  // namespace kiln
