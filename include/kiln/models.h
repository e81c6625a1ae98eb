// The model zoo: the PyTorch CIFAR-10 tutorial CNN, ResNet-18 for CIFAR and
// an airbench94-style net.
#pragma once
#include <memory>
#include <string>

#include "kiln/nn.h"

namespace kiln::models {

// conv 3->6 k5, maxpool 2, conv 6->16 k5, maxpool 2, linear 16*5*5->120->84->classes,
// ReLU. For 28x28 single-channel input (Fashion-MNIST) the first linear takes 16*4*4.
std::shared_ptr<nn::Module> tutorial_cnn(int64_t in_channels = 3, int64_t num_classes = 10, int64_t image_size = 32);

// ResNet-18 for CIFAR: 3x3 stem (64), no max-pool, basic blocks 64/128/256/512
// (two each, stride 2 from the second stage, 1x1 projection shortcuts), global
// average pool, linear 512->classes.
std::shared_ptr<nn::Module> resnet18(int64_t num_classes = 10, int64_t in_channels = 3);

// airbench94-style: conv 3->w0 k2 (no padding) + GELU stem; three blocks of
// conv3x3 -> maxpool 2 -> BN -> GELU -> conv3x3 -> BN -> GELU with widths
// 64/256/256 (times `width`, rounded to a multiple of 8; stem 24*width);
// global max-pool; linear ->classes without bias; output scaled by 1/9.
std::shared_ptr<nn::Module> airbench(double width = 1.0, int64_t num_classes = 10, int64_t in_channels = 3);

// By name: "tutorial", "resnet18", "airbench"; kiln::Error lists the names otherwise.
std::shared_ptr<nn::Module> create(const std::string& name, double width = 1.0, int64_t in_channels = 3,
                                   int64_t num_classes = 10, int64_t image_size = 32);

}  // namespace kiln::models
