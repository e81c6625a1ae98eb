// (being written) the matmul op family.
#include "ops/families.h"

namespace kiln {
void register_matmul_ops() {}
}  // namespace kiln
