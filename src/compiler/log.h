// What the compiler tells the user about its decisions, by category:
//   KILN_LOGS=graph_breaks,recompiles,guards,graphs,aot,precision   (or "all")
// read once, on the first question; an unknown name gets one warning line
// listing the valid ones. Each message goes to stderr as
// "[kiln:recompiles] message" and, while its category is on, into an
// in-memory list that tests read (logged_events) to assert, for example,
// that a train step compiled with zero recompiles.
//
// Callers put the reason and the user's source location into the message
// (source_location_str); log_once keys an event (a graph break at one
// place, a fallback for one function) so a loop reports it once per process.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/source_location.h"

namespace kiln::compiler {

enum class LogCategory : uint8_t { GraphBreaks, Recompiles, Guards, Graphs, Aot, Precision };
constexpr int kNumLogCategories = 6;

// "graph_breaks", "recompiles", "guards", "graphs", "aot", "precision": the KILN_LOGS names.
const char* log_category_name(LogCategory c);

bool log_enabled(LogCategory c);
// The trimmed, non-empty items of a comma list ("a, b,,c": a, b, c): how
// KILN_LOGS and KILN_DUMP are read.
std::vector<std::string_view> comma_list(std::string_view list);
// Prints "[kiln:<category>] <message>" to stderr when the category is on.
void log_event(LogCategory c, std::string_view message);
// As log_event, but only the first time `key` is logged in this category.
void log_once(LogCategory c, std::string_view key, std::string_view message);

// The messages logged in `c` while it was on, oldest first (at most the
// last 4096 are kept).
std::vector<std::string> logged_events(LogCategory c);

// Tests: configure_logs("recompiles,guards") behaves as if KILN_LOGS held
// that list; reset_logs() reads KILN_LOGS again. Both forget the once-keys
// and the kept messages.
void configure_logs(std::string_view spec);
void reset_logs();

// "file.cpp:42 in run_step": where user code called into the compiler.
std::string source_location_str(const SourceLocation& loc);

}  // namespace kiln::compiler
