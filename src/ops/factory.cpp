// (being written) the factory op family.
#include "ops/families.h"

namespace kiln {
void register_factory_ops() {}
}  // namespace kiln
