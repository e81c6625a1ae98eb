// Files that appear all at once or not at all: the on-disk caches' (compiled
// kernels, autotuning choices) only defence against a process killed half-way
// through a write (by a signal, OOM or power).
//
// Everything is first written under a temporary name in the same directory
// and then rename(2)d into place, which POSIX makes atomic within one file
// system: a reader sees the old state or the complete new file, never a
// partial one. A process killed before the rename leaves only a temporary
// file, which readers ignore (is_temp_file_name) and cleaners delete when old.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace kiln {

// dir/<stem>.tmp.<pid>.<n><suffix>: unique per process (pid) and per call (n).
std::filesystem::path unique_temp_path(const std::filesystem::path& dir, std::string_view stem,
                                       std::string_view suffix);
// True for names unique_temp_path makes.
bool is_temp_file_name(const std::string& filename);

// rename(2) `temp` onto `target` (same directory); failure is a kiln::Error.
void publish_file(const std::filesystem::path& temp, const std::filesystem::path& target);

// Writes `content` to a temporary file beside `target`, then publishes it.
void write_file_atomically(const std::filesystem::path& target, std::string_view content);

}  // namespace kiln
