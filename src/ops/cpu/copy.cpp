#include "ops/cpu/copy.h"

#include <cstring>

#include "ops/cpu/loops.h"

namespace kiln::cpu {

namespace {
template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return static_cast<float>(v) != 0.0f;
  else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(static_cast<float>(v));
  else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return static_cast<D>(static_cast<float>(v));
  else return static_cast<D>(v);
}
}  // namespace

void copy_cast(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    const char* s = static_cast<const char*>(src.data_ptr());
    char* d = static_cast<char*>(dst.data_ptr());
    int64_t bytes = static_cast<int64_t>(dst.nbytes());
    parallel_for(bytes, 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, static_cast<size_t>(e - b)); });
    return;
  }
  visit_dtype(dst.dtype(), [&]<typename D>() {
    visit_dtype(src.dtype(), [&]<typename S>() {
      for_each_row<2>(dst, {&src}, [](char* const* p, const int64_t* st, int64_t n) {
        char* d = p[0];
        const char* s = p[1];
        if (st[0] == sizeof(D) && st[1] == sizeof(S)) {
          D* dd = reinterpret_cast<D*>(d);
          const S* ss = reinterpret_cast<const S*>(s);
          for (int64_t i = 0; i < n; ++i) dd[i] = convert<D, S>(ss[i]);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<D*>(d + i * st[0]) = convert<D, S>(*reinterpret_cast<const S*>(s + i * st[1]));
        }
      });
    });
  });
}

}  // namespace kiln::cpu
