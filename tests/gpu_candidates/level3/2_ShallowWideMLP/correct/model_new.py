import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """The MLP as one extension call: per layer a cuBLAS SGEMM and one fused epilogue kernel
    (+ bias, ReLU on hidden layers). `self.network` only holds the parameters under the
    reference's names; it is never called."""

    def __init__(self, input_size, hidden_layer_sizes, output_size):
        super(ModelNew, self).__init__()
        layers = []
        current_input_size = input_size
        for hidden_size in hidden_layer_sizes:
            layers.append(nn.Linear(current_input_size, hidden_size))
            layers.append(nn.ReLU())
            current_input_size = hidden_size
        layers.append(nn.Linear(current_input_size, output_size))
        self.network = nn.Sequential(*layers)
        self.linear_indices = [i for i, layer in enumerate(layers) if isinstance(layer, nn.Linear)]

    def forward(self, x):
        weights = [self.network[i].weight for i in self.linear_indices]
        biases = [self.network[i].bias for i in self.linear_indices]
        return cuda_extension.forward(x, weights, biases)
