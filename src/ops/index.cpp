// (being written) the index op family.
#include "ops/families.h"

namespace kiln {
void register_index_ops() {}
}  // namespace kiln
