// The text inside a module's parentheses in print(model), as torch's extra_repr.
#pragma once
#include <string>

#include "kiln/nn.h"

namespace kiln::nn {

// "3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False" for
// the layers of kiln/nn.h; own parameter shapes for other modules (layers.cpp).
std::string extra_repr(const Module& m);
// "weight=[10, 256], scale=[]": a module's own parameters and buffers (module.cpp).
std::string own_parameter_summary(const Module& m);
// Python's repr of a float ("0.1", "1e-05", "2.0") and of a bool ("True").
std::string py_float(double v);
inline const char* py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace kiln::nn
