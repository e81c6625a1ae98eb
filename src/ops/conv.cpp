// (being written) the conv op family.
#include "ops/families.h"

namespace kiln {
void register_conv_ops() {}
}  // namespace kiln
