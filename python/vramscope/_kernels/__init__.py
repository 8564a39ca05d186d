"""What each op does on the GPU beyond its outputs' storages.

The dispatch mode gives every op its outputs from PyTorch's meta kernels;
this table adds what the CUDA kernels do besides: the cuBLAS handles and
workspaces of matrix products (`aten/src/ATen/native/cuda/Blas.cpp`), the
copies cuBLAS needs of operands it cannot address, the values code reads
(`.item()`), copies between the host and the simulated device.

One module per kernel family (`registry` holds the tables they fill); importing the package runs
every module's registrations, and the names the capture and the other modules use are re-exported
here.
"""

from __future__ import annotations

from . import (
    asserts,
    composite,
    conv,
    embedding,
    fft,
    foreach,
    host,
    index,
    loss,
    matmul,
    packed,
    pointwise,
    quant,
    reduce,
    registry,
    sampling,
    softmax,
    sort,
    spatial,
    storage,
)
from .asserts import DEVICE_ASSERT, INDEX_BOUNDS, INVALID_DEVICE, cuda_error, index_out_of_range
from .composite import _accumulate, dropout, linear, module_apply, prims_on_meta
from .conv import (
    SAVED_PENDING,
    _benchmark_first_call,
    _channels_last,
    _conv_workspace,
    _double_backward_operands,
    _native_depthwise_2d,
    _native_depthwise_3d,
    attach_saved,
    node_key,
)
from .fft import _istft
from .foreach import foreach_support
from .host import HOST_INDEX_LIMIT, _to_copy
from .index import _nonzero_scratch, _setitem
from .matmul import _matrix_needs_copy, addmm_uses_lt
from .reduce import _acc_bytes, reduce_scratch
from .registry import (
    AFTER,
    DISPATCH,
    FUNCTIONS,
    META_AUTOGRAD,
    NAMED_DISPATCH,
    NAMED_FUNCTIONS,
    NO_VALUES,
    OUTPUT_ORDER,
    PLAIN,
    PLAIN_OPS,
    SCRATCH_UNMODELLED,
    TRACED_AS_OWN,
    check_known,
)
from .sort import SMALL_SORT, _cub

__all__ = [
    "AFTER",
    "DEVICE_ASSERT",
    "DISPATCH",
    "FUNCTIONS",
    "HOST_INDEX_LIMIT",
    "INDEX_BOUNDS",
    "INVALID_DEVICE",
    "META_AUTOGRAD",
    "NAMED_DISPATCH",
    "NAMED_FUNCTIONS",
    "NO_VALUES",
    "OUTPUT_ORDER",
    "PLAIN",
    "PLAIN_OPS",
    "SAVED_PENDING",
    "SCRATCH_UNMODELLED",
    "SMALL_SORT",
    "TRACED_AS_OWN",
    "_acc_bytes",
    "_accumulate",
    "_benchmark_first_call",
    "_channels_last",
    "_conv_workspace",
    "_cub",
    "_double_backward_operands",
    "_istft",
    "_matrix_needs_copy",
    "_native_depthwise_2d",
    "_native_depthwise_3d",
    "_nonzero_scratch",
    "_setitem",
    "_to_copy",
    "addmm_uses_lt",
    "asserts",
    "attach_saved",
    "check_known",
    "composite",
    "conv",
    "cuda_error",
    "dropout",
    "embedding",
    "fft",
    "foreach",
    "foreach_support",
    "host",
    "index",
    "index_out_of_range",
    "linear",
    "loss",
    "matmul",
    "module_apply",
    "node_key",
    "packed",
    "pointwise",
    "prims_on_meta",
    "quant",
    "reduce",
    "reduce_scratch",
    "registry",
    "sampling",
    "softmax",
    "sort",
    "spatial",
    "storage",
]

from .. import _ctc, _rnn, _vision  # noqa: F401  (CTC, cuDNN RNNs and torchvision ops register their rules)
