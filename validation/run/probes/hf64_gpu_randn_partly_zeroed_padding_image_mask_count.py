"""Session 64 (helper hf), found probing blind282/jw02's family (Idefics2), NOT fixed: no GPU needed, the
answer is known by construction. Idefics2/Idefics3/SmolVLM drop padding images (all zeros) with
`(pixel_values == 0.0).sum(dim=(-1, -2, -3)) != nb_values_per_image` and `pixel_values[real_images_inds]`.
With pixel values drawn on the GPU (`torch.randn(..., device="cuda")`, past the twin's VALUE_LIMIT) and one
slot zeroed in place, the twin carries no values for the draw, computes the `sum` as zeros and the mask as all
True: it keeps 4 images where the GPU keeps 3 (the vision tower and resampler then run one image too many;
the placeholder check passes under the twin's checks_pass, so nothing raises). Pixel values built on the host
and copied over (what a processor gives) carry their values in the twin and count right (3).
    vramscope run --gpu h100 THIS.py     -> twin prints 4 and 3; the GPU prints 3 and 3."""

import torch

pix = torch.randn(4, 3, 490, 490, device="cuda")
pix[3] = 0
mask = (pix == 0.0).sum(dim=(-1, -2, -3)) != 3 * 490 * 490
print("gpu-drawn, one slot zeroed: real images", pix[mask].shape[0], "(GPU: 3)")

host = torch.randn(4, 3, 490, 490)
host[3] = 0
pix = host.to("cuda")
mask = (pix == 0.0).sum(dim=(-1, -2, -3)) != 3 * 490 * 490
print("host-built then copied:     real images", pix[mask].shape[0], "(GPU: 3)")
