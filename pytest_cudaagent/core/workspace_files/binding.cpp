// Fixed infrastructure of a CUDA-Agent workspace: the one module `cuda_extension`, holding every
// function that the kernels/*_binding.cpp files registered.
#include "binding_registry.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  for (auto registrar : cudaagent::registrars()) registrar(module);
}
