// (being written) the pool op family.
#include "ops/families.h"

namespace kiln {
void register_pool_ops() {}
}  // namespace kiln
