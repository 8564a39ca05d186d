"""The tables the capture consults for each op (`FUNCTIONS`, `DISPATCH`, `NAMED_DISPATCH`,
`NAMED_FUNCTIONS`, `META_AUTOGRAD`, `AFTER`,
`NO_VALUES`, `OUTPUT_ORDER`, `SCRATCH_UNMODELLED`), which every module of the package fills."""

from __future__ import annotations

#: function-mode handlers: func -> handler(cap, func, args, kwargs)
FUNCTIONS: dict = {}
#: function-mode handlers that also run while `torch.jit.trace` records (the others stand aside then)
TRACED_AS_OWN: set = set()
#: dispatch-mode handlers that replace the generic path
DISPATCH: dict = {}
#: the same for ops outside ATen, by schema name (their libraries load only if the program imports them)
NAMED_DISPATCH: dict = {}
#: function-mode handlers of ops outside ATen, by qualified name, whose kernels run before the
#: dispatch mode could see them (a library's CompositeImplicitAutograd kernel, which calls CUDA
#: itself: torchvision's nvJPEG decode)
NAMED_FUNCTIONS: dict = {}
#: AutogradMeta kernels for the twin's own meta calls of the ops whose AutogradMeta kernel is the
#: composite (`_capture._meta_composite_ops`), by op name: kernel(*args, **kwargs)
META_AUTOGRAD: dict = {}
#: rules run after the op's outputs are allocated: handler(cap, func, (args, kwargs), outputs)
AFTER: dict = {}
#: ops whose values are never computed on the CPU (random or huge side effects)
NO_VALUES: dict = {}
#: ATen overload names whose CUDA kernels allocate nothing but their outputs
PLAIN: set = set()
#: ops checked as plain by identity
PLAIN_OPS: set = set()
#: the order a CUDA kernel allocates its outputs in, where it is not the schema's: output indices
OUTPUT_ORDER: dict = {}
#: ops whose CUDA kernels allocate scratch the twin does not model yet
SCRATCH_UNMODELLED = {
    "aten::embedding_dense_backward",
    "aten::_embedding_bag",
    "aten::_embedding_bag_backward",
    "aten::convolution",
    "aten::convolution_backward",
    "aten::cudnn_convolution",
    "aten::_cudnn_rnn",
    "aten::_cudnn_rnn_backward",
    "aten::sort",
    "aten::topk",
    "aten::unique",
    "aten::_unique2",
    "aten::nonzero",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::cumsum",
    "aten::native_batch_norm",
    "aten::native_batch_norm_backward",
    "aten::cudnn_batch_norm",
    "aten::cudnn_batch_norm_backward",
    "aten::native_group_norm_backward",
    "aten::upsample_bilinear2d_backward",
    "aten::upsample_nearest2d_backward",
    "aten::multinomial",
    # cuSOLVER / cuBLAS / MAGMA workspaces and pointer arrays (cuda/linalg/BatchLinearAlgebra*.cpp)
    "aten::_linalg_det",
    "aten::_linalg_slogdet",
    "aten::_linalg_solve_ex",
    "aten::_linalg_svd",
    "aten::_cholesky_solve_helper",
    "aten::cholesky_inverse",
    "aten::geqrf",
    "aten::ormqr",
    "aten::linalg_eig",
    "aten::linalg_householder_product",
    "aten::linalg_inv_ex",
    "aten::linalg_ldl_factor_ex",
    "aten::linalg_ldl_solve",
    "aten::linalg_lstsq",
    "aten::linalg_lu",
    "aten::linalg_lu_factor_ex",
    "aten::linalg_lu_solve",
    "aten::linalg_pinv",
    "aten::linalg_qr",
    "aten::triangular_solve",
}


def check_known(cap, func) -> None:
    """Warn once for an op whose GPU scratch the twin does not model."""
    name = func._schema.name
    if name in SCRATCH_UNMODELLED:
        cap.note_unmeasured(name)
