// Everything a kiln user needs: tensors, ops, autograd, random numbers.
#pragma once
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "kiln/shape.h"
#include "kiln/storage.h"
#include "kiln/tensor.h"
