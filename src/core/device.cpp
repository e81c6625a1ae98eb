#include "kiln/device.h"

#include "kiln/error.h"

namespace kiln {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int idx = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && idx >= 0) return cuda(idx);
    } catch (const std::exception&) {
    }
  }
  KILN_FAIL("Device::parse: unknown device '", s, "'; use \"cpu\", \"cuda\" or \"cuda:N\"");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace kiln
