#include "binding_registry.h"

torch::Tensor scale_tanh_mean_forward(torch::Tensor input, torch::Tensor scale, torch::Tensor shift);

static void register_scale_tanh_mean(pybind11::module& module) {
  module.def("scale_tanh_mean_forward", &scale_tanh_mean_forward, "tanh(x * scale + shift).mean(-1), fused");
}
REGISTER_BINDING(scale_tanh_mean, register_scale_tanh_mean);
