// (being written) the inplace op family.
#include "ops/families.h"

namespace kiln {
void register_inplace_ops() {}
}  // namespace kiln
