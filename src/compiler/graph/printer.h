// The graph IR as text: what KILN_DUMP, explain and the pass tests show.
//
//   graph step(%0: f32[s0, 3, 32, 32], %1: f32[64, 3, 3, 3]; $0 lr: f64) {
//     %2: f32[s0, 64, 32, 32] = conv2d(%0, %1, None) {stride=[1, 1], padding=[1, 1]}
//     %3: f32[64, 3, 3, 3] = add_(%1, %2) {alpha=$0}   # file.cpp:12
//     return (%2, %3)
//   }
//
// Values print as %<id>, scalar inputs as $<index>, an absent optional input
// as None; attributes come from Attrs::str, with those read from scalar
// inputs shown as $<index>; a node's source location is a trailing comment.
// The form is stable: tests compare it as exact text.
#pragma once
#include <string>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

std::string print(const Graph& g);
// One node's line without indentation or newline ("%2: f32[3] = relu(%1)").
std::string print_node(const Graph& g, const Node& node);
// "{alpha=$0}" or "" when the node has no attributes.
std::string print_attrs(const Node& node);
std::string attr_value_str(const AttrValue& v);
const char* attr_type_name(const AttrValue& v);  // "i64", "f64", "bool", "ints", "dtype", "str"

}  // namespace kiln::compiler
