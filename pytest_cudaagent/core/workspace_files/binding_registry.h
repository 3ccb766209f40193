// Fixed infrastructure of a CUDA-Agent workspace: each kernels/*_binding.cpp registers its Python
// functions here with REGISTER_BINDING; binding.cpp turns the registry into one module.
// The evaluator compiles its own copy of this file, so a workspace's edits have no effect.
#pragma once
#include <torch/extension.h>
#include <vector>

namespace cudaagent {
using Registrar = void (*)(pybind11::module&);

inline std::vector<Registrar>& registrars() {
  static std::vector<Registrar> all;
  return all;
}

struct Registration {
  explicit Registration(Registrar registrar) { registrars().push_back(registrar); }
};
}  // namespace cudaagent

#define REGISTER_BINDING(NAME, REGISTRAR) \
  static ::cudaagent::Registration cudaagent_registration_##NAME(REGISTRAR)
