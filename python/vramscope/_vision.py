"""torchvision's deformable convolution and RoI pooling as their CUDA kernels run them: the host code of
`deform_conv2d_forward_kernel` and `deform_conv2d_backward_kernel`
(torchvision/csrc/ops/cuda/deform_conv2d_kernel.cu, the ATen build torchvision 0.26 ships), op by
op through the capture, each ATen call with its own rules (cuBLAS's handle and workspace per
thread included). The device kernels (`deformable_im2col`, `col2im`, `col2im_coord`) allocate
nothing. Checked against blind52/az01's H200 per-op record: every forward and backward call's
requested bytes and allocation count. The RoI ops (`roi_align`, `roi_pool`, `ps_roi_align`,
`ps_roi_pool` and their backwards, csrc/ops/cuda/*roi*_kernel.cu) allocate their zeroed outputs,
then contiguous copies of the operands their kernels index densely."""

from __future__ import annotations

import torch

from ._kernels import NAMED_DISPATCH, NAMED_FUNCTIONS
from ._tensor import assumed, registered, set_value, value

#: `kMaxParallelImgs` in deform_conv2d_kernel.cu: images im2col'd together
MAX_PARALLEL_IMGS = 32


def parallel_imgs(batch: int) -> int:
    """`get_greatest_divisor_below_bound(batch, kMaxParallelImgs)`."""
    for k in range(MAX_PARALLEL_IMGS, 1, -1):
        if batch % k == 0:
            return k
    return 1


def _out_size(size: int, pad: int, dilation: int, kernel: int, stride: int) -> int:
    return (size + 2 * pad - (dilation * (kernel - 1) + 1)) // stride + 1


def _forward(inp, weight, offset, mask, bias, sh, sw, ph, pw, dh, dw, wgroups, ogroups, use_mask):
    """`deform_conv2d_forward_kernel`: contiguous operands, a zeroed output and `out_buf`, one
    zeroed `columns` of (C_in kh kw, n_par oh ow), an `addmm_` per block and weight group, the
    transposed copy back and `out + bias`, before any of them dies."""
    input_c, offset_c, weight_c = inp.contiguous(), offset.contiguous(), weight.contiguous()
    mask_c, bias_c = mask.contiguous(), bias.contiguous()
    batch, cin, h, w = input_c.shape
    npar = parallel_imgs(batch)
    cout, _, kh, kw = weight_c.shape
    oh, ow = _out_size(h, ph, dh, kh, sh), _out_size(w, pw, dw, kw, sw)
    out = input_c.new_zeros((batch, cout, oh, ow))
    if batch == 0:
        return out
    blocks = batch // npar
    out = out.view(blocks, npar, cout, oh, ow)
    out_buf = out.new_zeros((blocks, cout, npar * oh, ow))
    out_buf = out_buf.view(blocks, wgroups, cout // wgroups, npar * oh, ow)
    weight_c = weight_c.view(wgroups, cout // wgroups, *weight_c.shape[1:])
    columns = input_c.new_zeros((cin * kh * kw, npar * oh * ow))
    for b in range(blocks):
        columns = columns.view(wgroups, columns.size(0) // wgroups, columns.size(1))
        for g in range(wgroups):
            out_buf[b][g].flatten(1).addmm_(weight_c[g].flatten(1), columns[g])
        columns = columns.view(columns.size(0) * columns.size(1), columns.size(2))
    out_buf = out_buf.view(blocks, cout, npar, oh, ow)
    out_buf.transpose_(1, 2)
    out.copy_(out_buf)
    out = out.view(batch, cout, oh, ow)
    result = out + bias_c.view(1, cout, 1, 1)
    del columns, out_buf, out, offset_c, mask_c  # the kernel's locals live to its return
    return result


def _grad_inputs(inp, weight, offset, mask, grad_out, wgroups, ogroups, npar, use_mask):
    """`backward_gradient_inputs`: zeroed gradients of input, offset and mask, one `columns`
    (`at::empty`), and per block and group `addmm_(weight_g^T, grad_out_g.flatten(1))`, whose
    flattened slice of the permuted gradient is a copy that dies with its statement."""
    batch, cin = inp.shape[:2]
    npar = min(batch, npar)
    cout, _, kh, kw = weight.shape
    oh, ow = grad_out.shape[2], grad_out.shape[3]
    grad_input, grad_offset, grad_mask = (
        torch.zeros_like(inp),
        torch.zeros_like(offset),
        torch.zeros_like(mask),
    )
    if batch == 0:
        return grad_input, grad_offset, grad_mask
    blocks = batch // npar
    columns = inp.new_empty((cin * kw * kh, npar * oh * ow))
    grad_out = grad_out.reshape(blocks, npar, wgroups, cout // wgroups, oh, ow).permute(0, 2, 3, 1, 4, 5)
    weight = weight.reshape(wgroups, cout // wgroups, *weight.shape[1:])
    columns = columns.view(wgroups, columns.size(0) // wgroups, columns.size(1))
    for elt in range(blocks):
        columns.zero_()
        for g in range(wgroups):
            columns[g].addmm_(weight[g].flatten(1).transpose(0, 1), grad_out[elt][g].flatten(1))
    del columns
    grad_offset = grad_offset.view(batch, -1, oh, ow)
    if use_mask:
        grad_mask = grad_mask.view(batch, -1, oh, ow)
    return grad_input, grad_offset, grad_mask


def _grad_weight(inp, weight, grad_out, wgroups, npar):
    """`backward_gradient_parameters`: a zeroed weight gradient, the permuted gradient made
    contiguous (`grad_out_buf`), one `columns` (`at::empty`) and an `addmm_` per block and group."""
    batch, cin, _, _ = inp.shape
    npar = min(batch, npar)
    cout, _, kh, kw = weight.shape
    oh, ow = grad_out.shape[2], grad_out.shape[3]
    grad_weight = torch.zeros_like(weight)
    if batch == 0:
        return grad_weight
    blocks = batch // npar
    grad_out_buf = grad_out.reshape(blocks, npar, wgroups, cout // wgroups, oh, ow).permute(0, 2, 3, 1, 4, 5)
    grad_out_buf = grad_out_buf.contiguous()
    grad_weight = grad_weight.view(wgroups, cout // wgroups, *weight.shape[1:])
    columns = inp.new_empty((wgroups, cin * kw * kh // wgroups, npar * oh * ow))
    for elt in range(blocks):
        for g in range(wgroups):
            grad_weight[g].flatten(1).addmm_(grad_out_buf[elt][g].flatten(1), columns[g].transpose(1, 0))
    del columns, grad_out_buf
    return grad_weight.view(-1, *weight.shape[1:])


def _backward(grad, inp, weight, offset, mask, bias, sh, sw, ph, pw, dh, dw, wgroups, ogroups, use_mask):
    """`deform_conv2d_backward_kernel`: contiguous operands, the input-side gradients, the weight's,
    then the bias's as `ones_like(bias) * grad_out.sum({0, 2, 3})`."""
    grad_c, input_c, weight_c = grad.contiguous(), inp.contiguous(), weight.contiguous()
    offset_c, mask_c, bias_c = offset.contiguous(), mask.contiguous(), bias.contiguous()
    npar = parallel_imgs(input_c.size(0))
    gi, go, gm = _grad_inputs(input_c, weight_c, offset_c, mask_c, grad_c, wgroups, ogroups, npar, use_mask)
    gw = _grad_weight(input_c, weight_c, grad_c, wgroups, npar)
    value = grad_c.sum((0, 2, 3))
    gb = torch.ones_like(bias_c) * value
    return gi, gw, go, gm, gb


def _rule(body, n_tensors: int):
    def rule(cap, func, args, kwargs):
        if kwargs or len(args) != n_tensors + 9 or not all(registered(t) for t in args[:n_tensors]):
            return NotImplemented
        if args[n_tensors - 5].dim() != 4 or args[n_tensors - 4].dim() != 4:
            return NotImplemented
        cap.ops += 1
        with cap._modes[1]:
            return body(*args)

    return rule


def _dense(*tensors):
    """The kernels' `x.contiguous()` locals: a copy of each operand that is not contiguous, alive
    until the host function returns."""
    return [t.contiguous() for t in tensors]


def _roi_align(inp, rois, scale, ph, pw, ratio, aligned):
    """`roi_align_forward_kernel`: the zeroed output, then (unless it is empty) the contiguous input
    and boxes."""
    out = inp.new_zeros((rois.size(0), inp.size(1), ph, pw))
    if out.numel():
        _dense(inp, rois)
    return out


def _roi_align_backward(grad, rois, scale, ph, pw, batch, channels, h, w, ratio, aligned):
    """`roi_align_backward_kernel`: the zeroed input gradient, then the contiguous boxes (the
    gradient is read through its strides)."""
    grad_input = grad.new_zeros((batch, channels, h, w))
    if grad.numel():
        _dense(rois)
    return grad_input


def _pooled_with_index(channels_out, index_dtype):
    """`roi_pool`, `ps_roi_align`, `ps_roi_pool` forwards: the zeroed output and its int32 index
    (`argmax` / `channel_mapping`), then the contiguous input and boxes."""

    def forward(inp, rois, scale, ph, pw, *rest):
        sizes = (rois.size(0), channels_out(inp.size(1), ph, pw), ph, pw)
        out = inp.new_zeros(sizes)
        index = torch.zeros(sizes, dtype=index_dtype, device=inp.device)
        if out.numel():
            _dense(inp, rois)
        return out, index

    return forward


def _pool_backward(dense_grad: bool, n_dims_after: int):
    """The backwards of `roi_pool` (contiguous argmax and boxes; the gradient read through its
    strides) and of the position-sensitive ops (contiguous gradient and boxes): the zeroed input
    gradient first. `n_dims_after` is where (batch, channels, height, width) start in the call."""

    def backward(grad, rois, index, *rest):
        batch, channels, h, w = rest[n_dims_after : n_dims_after + 4]
        grad_input = grad.new_zeros((batch, channels, h, w))
        if grad.numel():
            _dense(*((grad, rois) if dense_grad else (index, rois)))
        return grad_input

    return backward


def _tensor_rule(body, n_tensors: int, n_args: int):
    """A rule for an op of `n_args` positional arguments whose first `n_tensors` are simulated
    4-D / 2-D tensors (feature map or gradient, boxes, index)."""

    def rule(cap, func, args, kwargs):
        if kwargs or len(args) != n_args or not all(registered(t) for t in args[:n_tensors]):
            return NotImplemented
        if args[0].dim() != 4 or args[1].dim() != 2:
            return NotImplemented
        cap.ops += 1
        with cap._modes[1]:
            return body(*args)

    return rule


NAMED_DISPATCH["torchvision::deform_conv2d"] = _rule(_forward, 5)
NAMED_DISPATCH["torchvision::_deform_conv2d_backward"] = _rule(_backward, 6)
NAMED_DISPATCH["torchvision::roi_align"] = _tensor_rule(_roi_align, 2, 7)
NAMED_DISPATCH["torchvision::_roi_align_backward"] = _tensor_rule(_roi_align_backward, 2, 11)
NAMED_DISPATCH["torchvision::roi_pool"] = _tensor_rule(
    _pooled_with_index(lambda c, ph, pw: c, torch.int32), 2, 5
)
NAMED_DISPATCH["torchvision::_roi_pool_backward"] = _tensor_rule(_pool_backward(False, 3), 3, 10)
NAMED_DISPATCH["torchvision::ps_roi_align"] = _tensor_rule(
    _pooled_with_index(lambda c, ph, pw: c // (ph * pw), torch.int32), 2, 6
)
NAMED_DISPATCH["torchvision::_ps_roi_align_backward"] = _tensor_rule(_pool_backward(True, 4), 3, 11)
NAMED_DISPATCH["torchvision::ps_roi_pool"] = _tensor_rule(
    _pooled_with_index(lambda c, ph, pw: c // (ph * pw), torch.int32), 2, 5
)
NAMED_DISPATCH["torchvision::_ps_roi_pool_backward"] = _tensor_rule(_pool_backward(True, 3), 3, 10)


# ---- nvJPEG decoding --------------------------------------------------------------------------

#: JPEG start-of-frame markers: SOF0 to SOF15 but DHT (C4), JPG (C8) and DAC (CC)
_SOF = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: `decode_jpegs_cuda`'s output channels by `ImageReadMode` value: UNCHANGED and RGB decode three
#: planes, GRAY one; the alpha modes are refused on the GPU
_JPEG_CHANNELS = {0: 3, 1: 1, 3: 3}


def _jpeg_header(data: torch.Tensor):
    """(components, height, width) of a JPEG bitstream, from its start-of-frame segment, as
    `nvjpegGetImageInfo` reads them; None where there is none."""
    with torch._C.DisableTorchFunction():
        b = data.contiguous().numpy().tobytes()
    if b[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 4 <= len(b):
        if b[i] != 0xFF:
            return None
        marker = b[i + 1]
        if marker == 0xFF:
            i += 1  # a fill byte
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            i += 2  # markers without a length
            continue
        if marker in _SOF:
            if i + 10 > len(b):
                return None
            return b[i + 9], int.from_bytes(b[i + 5 : i + 7], "big"), int.from_bytes(b[i + 7 : i + 9], "big")
        i += 2 + int.from_bytes(b[i + 2 : i + 4], "big")
    return None


def _decode_jpegs_cuda(cap, func, args, kwargs):
    """torchvision's `decode_jpegs_cuda` (csrc/io/image/cuda/decode_jpegs_cuda.cpp, nvJPEG), which
    `decode_jpeg(data, device="cuda")` calls: each CPU bitstream's header read, then
    `prepare_buffers` takes one uint8 (C, H, W) output a bitstream from the caching allocator, in
    order, on the current stream (C 3 for RGB and UNCHANGED, 1 for GRAY); in UNCHANGED a
    one-component image's output is its first plane cloned, the three-plane one freed. nvJPEG's
    own buffers come from cudaMalloc (its handle is made with NULL allocators), outside the
    allocator's statistics."""
    names = ("encoded_images", "mode", "device")
    a = dict(zip(names, args, strict=False)) | kwargs
    encoded, mode, device = a.get("encoded_images"), a.get("mode"), a.get("device")
    if not isinstance(encoded, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in encoded):
        return NotImplemented
    if any(registered(t) for t in encoded):
        raise RuntimeError("The input tensor must be on CPU when decoding with nvjpeg")
    if torch.device(device).type != "cuda":
        raise RuntimeError("Expected the device parameter to be a cuda device")
    for t in encoded:
        if t.dtype != torch.uint8:
            raise RuntimeError("Expected a torch.uint8 tensor")
        if t.dim() != 1 or t.numel() == 0:
            raise RuntimeError("Expected a non empty 1-dimensional tensor")
    if mode not in _JPEG_CHANNELS:
        raise RuntimeError("The provided mode is not supported for JPEG decoding on GPU")
    headers = [_jpeg_header(t) for t in encoded]
    if any(h is None for h in headers):
        raise RuntimeError("Error while decoding JPEG images: Failed to get image info")
    cap.ops += 1
    # the function mode's handler: the ops below reach the dispatch mode as the program's do
    outs = [
        torch.empty((_JPEG_CHANNELS[mode], h, w), dtype=torch.uint8, device=device) for _c, h, w in headers
    ]
    if mode == 0:
        for i, (c, _h, _w) in enumerate(headers):
            if c == 1:
                outs[i] = outs[i][0].unsqueeze(0).clone()
    return outs


# registered as a CompositeImplicitAutograd kernel, which runs before the dispatch mode
NAMED_FUNCTIONS["image::decode_jpegs_cuda"] = _decode_jpegs_cuda


def _encode_jpegs_cuda(cap, func, args, kwargs):
    """torchvision's `encode_jpegs_cuda` (csrc/io/image/cuda/encode_jpegs_cuda.cpp, nvJPEG), which
    `encode_jpeg` of CUDA images calls: each image checked (uint8, one CUDA device, (3, H, W)), a
    non-contiguous one copied contiguous (all copies kept to the return), then per image
    `CUDAJpegEncoder::encode_jpeg` takes one uint8 bitstream of the encoded length on the device.
    That length depends on the pixels: nvJPEG encodes 4:4:4 (`NVJPEG_CSS_444`) at the quality
    asked with the standard Huffman tables, so the twin takes libjpeg's length of the same
    encoding (PIL's `subsampling=0`, `optimize=False`) over the values it carries (stand-in zeros
    elsewhere), named unmeasured: on the H200 (session 60's nvjpeg_ssd_subclass_probe_s60.py) it
    gave the flat and the q90 gradient image's lengths exactly and the others within 0.12% (DCT
    and colour conversion differ), every bitstream's 512-byte block the same; torchvision's host
    encoder (4:2:0) gave 35-52% less."""
    names = ("decoded_images", "quality")
    a = dict(zip(names, args, strict=False)) | kwargs
    images, quality = a.get("decoded_images"), a.get("quality", 75)
    if not isinstance(images, (list, tuple)) or not all(registered(t) for t in images):
        return NotImplemented
    if not images:
        raise RuntimeError("Empty input tensor list")
    for t in images:
        if t.dtype != torch.uint8:
            raise RuntimeError("Input tensor dtype should be uint8")
        if t.dim() != 3 or t.numel() == 0:
            raise RuntimeError("Input data should be a 3-dimensional tensor")
        if t.shape[0] != 3:
            raise RuntimeError(f"The number of channels should be 3, got: {t.shape[0]}")
    cap.ops += 1
    cap.note_unmeasured(
        "nvJPEG's encoded length (image::encode_jpegs_cuda): estimated by the host encoder",
        "encode_jpeg of CUDA images: nvJPEG's bitstream length depends on the pixels; the twin takes "
        "libjpeg's 4:4:4 length over the values it carries (zeros where it carries none)",
    )
    contig = [t if t.is_contiguous() else t.contiguous() for t in images]
    outs = []
    for t in contig:
        carried = value(t) is not None and not assumed(t)
        with torch._C.DisableTorchFunction():
            host = cap.value_of(t, "encode_jpeg").contiguous()
        stream = _jpeg_444(host, int(quality))
        out = torch.empty((stream.numel(),), dtype=torch.uint8, device=t.device)
        # the bitstream itself, so that the program can decode it again (`decode_jpeg` of its
        # `.cpu()` reads the header nvJPEG wrote: zeros there raised "Failed to get image info")
        set_value(out, stream, assumed=not carried)
        outs.append(out)
    del contig
    return outs


NAMED_FUNCTIONS["image::encode_jpegs_cuda"] = _encode_jpegs_cuda


def _jpeg_444(host: torch.Tensor, quality: int) -> torch.Tensor:
    """A (3, H, W) uint8 image's baseline JPEG with 4:4:4 sampling at `quality`, a uint8 CPU
    tensor (libjpeg through PIL, a torchvision dependency; without it the host encoder's 4:2:0)."""
    try:
        import io

        from PIL import Image
    except ImportError:
        return torch.ops.image.encode_jpeg(host, quality)
    buf = io.BytesIO()
    Image.fromarray(host.permute(1, 2, 0).contiguous().numpy()).save(
        buf, format="JPEG", quality=quality, subsampling=0, optimize=False
    )
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _jpeg_444_length(host: torch.Tensor, quality: int) -> int:
    """The length of `_jpeg_444`'s bitstream."""
    return _jpeg_444(host, quality).numel()
