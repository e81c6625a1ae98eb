// Where a tensor lives. Storage, allocators and kernels are keyed by DeviceType,
// so a backend is added by registering its allocator and kernels, not by
// touching callers.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA };
constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // Parses "cpu", "cuda", "cuda:1"; throws kiln::Error on anything else.
  static Device parse(const std::string& s);
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device& o) const = default;
};

std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace kiln
