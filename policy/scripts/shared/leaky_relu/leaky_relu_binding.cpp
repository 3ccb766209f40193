#include "binding_registry.h"

torch::Tensor leaky_relu_forward(torch::Tensor input, double negative_slope);

static void register_leaky_relu(pybind11::module& module) {
  module.def("leaky_relu_forward", &leaky_relu_forward, "leaky ReLU over a contiguous fp32 tensor");
}
REGISTER_BINDING(leaky_relu, register_leaky_relu);
