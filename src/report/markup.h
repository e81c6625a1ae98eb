// Building HTML and SVG text. html_escape: text placed into markup, with the
// five characters that could end an element, an attribute or an entity
// written as entities; shared by the pages kiln writes (kiln explain --html,
// kiln report) so no caller forgets one. append: markup built piece by piece.
#pragma once
#include <string>
#include <string_view>

namespace kiln::report {

// & < > " ' as entities; everything else (UTF-8 included) unchanged.
std::string html_escape(const std::string& text);

// Appends each part (string literals, std::strings) to `out`. Markup is built
// this way rather than with "literal" + std::string chains, on which GCC 12
// reports a false -Wrestrict.
template <typename... Parts>
void append(std::string& out, const Parts&... parts) {
  (out.append(std::string_view(parts)), ...);
}

}  // namespace kiln::report
