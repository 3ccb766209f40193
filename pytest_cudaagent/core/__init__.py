"""What every other part of the evaluator speaks: the settings that decide a verdict (`config`),
the one record of an evaluation (`result`), problem and candidate files and how they load
(`files`, with the workspace binding files it copies), whose "correct" a verdict follows
(`conventions`), the element-wise comparison (`compare`), the milestone reward (`reward`), and
tensors as trees and host copies in shared memory (`tensor_trees`, `shared_tensors`). It imports
only `system`. The evaluation itself (`pytest_cudaagent.evaluation`, which uses every part) is not
here but at the package's top, beside the CLI and the plugin."""
