// (being written) the reduce op family.
#include "ops/families.h"

namespace kiln {
void register_reduce_ops() {}
}  // namespace kiln
