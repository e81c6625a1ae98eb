// describe_machine (report_page.h): where a report's numbers came from. A
// field that cannot be read says so ("unknown ...") rather than failing the
// report: the numbers stay useful without it.
#include <omp.h>
#include <sys/utsname.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include "cli/report_page.h"
#include "core/cpu_features.h"
#include "kiln/cuda.h"
#include "kiln/device.h"

#ifndef KILN_VERSION_STRING
#define KILN_VERSION_STRING "unknown"
#endif
#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR ""
#endif

namespace kiln::cli {
namespace {

// The value of the first "key<spaces>: value" line of a /proc file.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "";
}

// The commit of the source tree this program was built from, read with git
// at run time ("-dirty" when the tree had changes); the binary has no copy.
std::string source_commit() {
  const std::string dir = KILN_SOURCE_DIR;
  if (dir.empty()) return "unknown (built without its source directory)";
  std::string cmd = "git -C '";
  cmd += dir;
  cmd += "' describe --always --dirty --abbrev=12 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "unknown (git did not run)";
  char buf[256] = {};
  std::string out = fgets(buf, sizeof buf, p) ? buf : "";
  int rc = pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (rc != 0 || out.empty()) {
    std::string why = "unknown (";
    why += dir;
    why += " is not a git checkout)";
    return why;
  }
  std::string text = out;
  text += " (";
  text += dir;
  text += ")";
  return text;
}

std::string utc_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

MachineInfo describe_machine(const std::string& device) {
  MachineInfo m;
  m.cpu_model = proc_field("/proc/cpuinfo", "model name");
  if (m.cpu_model.empty()) m.cpu_model = "unknown (no model name in /proc/cpuinfo)";
  m.logical_cpus = std::thread::hardware_concurrency();
  m.threads = omp_get_max_threads();
  m.isa = cpu_isa_name(cpu_isa());
  // "24683664 kB" -> "23.5 GiB"
  const std::string mem_kb = proc_field("/proc/meminfo", "MemTotal");
  char mem[64] = "unknown";
  if (!mem_kb.empty()) std::snprintf(mem, sizeof mem, "%.1f GiB", std::strtod(mem_kb.c_str(), nullptr) / (1 << 20));
  m.memory = mem;
  utsname u{};
  m.os = uname(&u) == 0 ? std::string(u.sysname) + " " + u.release + " " + u.machine : "unknown";
  m.kiln_version = KILN_VERSION_STRING;
  m.commit = source_commit();
  m.date = utc_now();
  Device d = Device::parse(device);
  m.device = d.str();
  if (d.is_cuda()) m.device += cuda::is_available() ? ", CUDA available" : ", CUDA unavailable";
  return m;
}

}  // namespace kiln::cli
