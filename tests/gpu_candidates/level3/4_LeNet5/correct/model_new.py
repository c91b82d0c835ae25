import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """LeNet-5 in five launches: two fused conv + bias + ReLU + 2x2 max-pool kernels (the
    second writes the flattened (batch, 400) features directly), then three cuBLAS SGEMMs,
    each followed by a fused bias (+ ReLU) epilogue. The submodules only hold the parameters
    under the reference's names; they are never called."""

    def __init__(self, num_classes):
        super(ModelNew, self).__init__()
        self.conv1 = nn.Conv2d(in_channels=1, out_channels=6, kernel_size=5, stride=1)
        self.conv2 = nn.Conv2d(in_channels=6, out_channels=16, kernel_size=5, stride=1)
        self.fc1 = nn.Linear(in_features=16 * 5 * 5, out_features=120)
        self.fc2 = nn.Linear(in_features=120, out_features=84)
        self.fc3 = nn.Linear(in_features=84, out_features=num_classes)

    def forward(self, x):
        return cuda_extension.forward(x, self.conv1.weight, self.conv1.bias, self.conv2.weight, self.conv2.bias,
                                      [self.fc1.weight, self.fc2.weight, self.fc3.weight],
                                      [self.fc1.bias, self.fc2.bias, self.fc3.bias])
