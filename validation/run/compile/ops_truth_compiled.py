"""validation/run/ops_truth.py for compiled programs: its dispatch mode says it ignores compile
internals (as `vramscope run`'s capture does), so dynamo compiles under it instead of running the
frame eagerly, and the mode sees the compiled wrapper's library calls (`extern_kernels.convolution`,
fallbacks such as `aten.convolution_backward`) as ops.

    OUT_JSONL=OUT.jsonl python ops_truth_compiled.py SCRIPT [ARGS...]
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ops_truth


class OpsTruthCompiled(ops_truth.OpsTruth):
    @classmethod
    def ignore_compile_internals(cls):
        return True


ops_truth.OpsTruth = OpsTruthCompiled
ops_truth.main()
