import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cpp_source = """
torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* out = output.data_ptr<float>();
    for (int64_t i = 0; i < input.numel(); ++i) out[i] = in[i] < 0.f ? 0.f : in[i];
    return output;
}
"""

relu = load_inline(
    name="relu",
    cpp_sources=relu_cpp_source,
    functions=["relu"],
    verbose=False,
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu.relu(x)
