// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Umbrella header of the `cuda` component (CUDA runtime helpers).

#include "cuda_agent/cuda/device.hpp"
