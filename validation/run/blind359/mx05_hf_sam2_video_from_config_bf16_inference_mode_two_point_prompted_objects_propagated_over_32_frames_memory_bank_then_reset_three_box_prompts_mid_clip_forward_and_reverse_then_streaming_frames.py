"""SAM 2 video object tracking as the transformers video-segmentation docs show it, weights random: a
Sam2VideoModel from `Sam2VideoConfig()` (Hiera image encoder with FPN neck at 1024 x 1024, prompt encoder and
two-way mask decoder, memory attention of 4 layers with 2-D RoPE, memory encoder, a memory bank of 7 frames
plus up to 16 object pointers) in bf16 under inference_mode. The processor is built from its parts
(`Sam2VideoProcessor(Sam2ImageProcessor(), Sam2VideoVideoProcessor())`, nothing downloaded); the video is a
uint8 CUDA tensor the video processor resizes and normalizes on the GPU (`init_video_session` with
`inference_device="cuda"`, so the frames, the vision-feature cache and every object's per-frame outputs and
memories stay on the GPU).

Phases: 0 model in bf16; 1 a 32-frame 480 x 854 clip: two objects prompted with clicks (one positive, and a
positive + a negative) on frame 0, `model(inference_session, frame_idx=0)`, then `propagate_in_video_iterator`
over the clip, each frame's masks post-processed to 480 x 854 (`post_process_masks`, binarized) and kept on
the GPU; 2 `reset_inference_session()`, three objects prompted with boxes on frame 12, propagated forward to
the end and then in reverse to frame 0 (masks kept as before); 3 a new streaming session (no video given):
24 frames of 720 x 1280 processed one at a time by the image processor on the GPU, the first with a click per
object for two objects (`original_size` given), each passed as `frame=` and its masks post-processed. Seeded;
no sizes depend on values (the memory bank's selection depends only on frame indices)."""

import os

import torch
from transformers import (
    Sam2ImageProcessor,
    Sam2VideoConfig,
    Sam2VideoModel,
    Sam2VideoProcessor,
    Sam2VideoVideoProcessor,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3595)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    T1, H1, W1, T3, H3, W3, BOX_FRAME = 3, 96, 160, 2, 90, 160, 1
else:
    T1, H1, W1, T3, H3, W3, BOX_FRAME = 32, 480, 854, 24, 720, 1280, 12
dtype = torch.bfloat16 if cuda else torch.float32


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


model = Sam2VideoModel(Sam2VideoConfig()).to(device, dtype=dtype)
model.eval()
processor = Sam2VideoProcessor(
    image_processor=Sam2ImageProcessor(), video_processor=Sam2VideoVideoProcessor()
)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 sam2 video model in bf16")


def masks_of(session, output):
    return processor.post_process_masks(
        [output.pred_masks], original_sizes=[[session.video_height, session.video_width]], binarize=True
    )[0]


video = torch.randint(0, 256, (T1, 3, H1, W1), dtype=torch.uint8, device=device)
with torch.inference_mode():
    session = processor.init_video_session(video=video, inference_device=device, dtype=dtype)
    processor.add_inputs_to_inference_session(
        inference_session=session,
        frame_idx=0,
        obj_ids=[1, 2],
        input_points=[[[[W1 * 0.3, H1 * 0.5]], [[W1 * 0.7, H1 * 0.4], [W1 * 0.75, H1 * 0.6]]]],
        input_labels=[[[1], [1, 0]]],
    )
    out = model(inference_session=session, frame_idx=0)
    print(f"frame 0 objects {out.object_ids} masks {tuple(out.pred_masks.shape)}")
    segments = {}
    for out in model.propagate_in_video_iterator(session):
        segments[out.frame_idx] = masks_of(session, out)
    print(f"tracked frames {len(segments)} masks {tuple(segments[T1 - 1].shape)}")
del out
report(f"phase1 two clicked objects propagated over {T1} frames of {H1}x{W1}")

boxes = [
    [
        [W1 * 0.1, H1 * 0.1, W1 * 0.4, H1 * 0.5],
        [W1 * 0.5, H1 * 0.2, W1 * 0.9, H1 * 0.8],
        [W1 * 0.3, H1 * 0.6, W1 * 0.6, H1 * 0.95],
    ]
]
with torch.inference_mode():
    session.reset_inference_session()
    segments = {}
    processor.add_inputs_to_inference_session(
        inference_session=session, frame_idx=BOX_FRAME, obj_ids=[3, 4, 5], input_boxes=boxes
    )
    out = model(inference_session=session, frame_idx=BOX_FRAME)
    for out in model.propagate_in_video_iterator(session, start_frame_idx=BOX_FRAME):
        segments[out.frame_idx] = masks_of(session, out)
    for out in model.propagate_in_video_iterator(session, start_frame_idx=BOX_FRAME, reverse=True):
        segments[out.frame_idx] = masks_of(session, out)
    print(
        f"box prompts at frame {BOX_FRAME}: tracked frames {len(segments)} masks {tuple(segments[0].shape)}"
    )
del out, session, segments, video
report(f"phase2 three box-prompted objects from frame {BOX_FRAME}, forward then reverse")

with torch.inference_mode():
    stream = processor.init_video_session(inference_device=device, dtype=dtype)
    kept = []
    for idx in range(T3):
        frame = torch.randint(0, 256, (3, H3, W3), dtype=torch.uint8, device=device)
        inputs = processor(images=frame, device=device, return_tensors="pt")
        if idx == 0:
            processor.add_inputs_to_inference_session(
                inference_session=stream,
                frame_idx=0,
                obj_ids=[1, 2],
                input_points=[[[[W3 * 0.25, H3 * 0.5]], [[W3 * 0.7, H3 * 0.5]]]],
                input_labels=[[[1], [1]]],
                original_size=inputs.original_sizes[0],
            )
        out = model(inference_session=stream, frame=inputs.pixel_values[0].to(dtype))
        kept.append(masks_of(stream, out))
    print(f"streamed frames {len(kept)} masks {tuple(kept[-1].shape)}")
    del out, inputs, frame
report(f"phase3 streaming {T3} frames of {H3}x{W3} with two clicked objects")
