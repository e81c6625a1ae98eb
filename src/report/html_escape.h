// Text placed into HTML or SVG markup: the five characters that could end an
// element, an attribute or an entity are written as entities. Shared by the
// pages kiln writes (kiln explain --html, kiln report) so no caller forgets one.
#pragma once
#include <string>

namespace kiln::report {

// & < > " ' as entities; everything else (UTF-8 included) unchanged.
std::string html_escape(const std::string& text);

}  // namespace kiln::report
