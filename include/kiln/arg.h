// KILN_ARG: a builder-style option field, as libtorch's TORCH_ARG, shared by
// the nn and optim options so both read the same way:
//   Conv2dOptions(3, 64, 3).padding(1).bias(false)
//   SGDOptions(0.1).momentum(0.9).nesterov(true)
// Declares a chainable setter name(v), a getter name() and the field name_
// (which may take a default: KILN_ARG(double, eps) = 1e-5;).
#pragma once

#define KILN_ARG(T, name)                               \
  auto& name(const T& v) { name##_ = v; return *this; } \
  const T& name() const { return name##_; }             \
  T name##_
