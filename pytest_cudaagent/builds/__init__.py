"""How a candidate's C++/CUDA code is built: torch's `load`/`load_inline` with a shared
precompiled header and build locks (`fast_build`), the `.cu` compiled on torch's tensor headers
(`header_diet`), nvcc's two front ends side by side (`split_nvcc`, also run as a script by the
build's ninja file, so it imports only `header_diet` beside it) and what of a failed build goes into
`Result.error` (`build_errors`). Loading the built module and the workspace binding are `core.files`."""
