import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Off by one: the last element is never written.
source = """
torch::Tensor relu(torch::Tensor x) {
    auto output = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = output.data_ptr<float>();
    for (int64_t i = 0; i + 1 < x.numel(); ++i) out[i] = in[i] < 0.f ? 0.f : in[i];
    return output;
}
"""

module = load_inline(name="relu_off_by_one", cpp_sources=source, functions={"relu": "ReLU"})


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x):
        return module.relu(x)
