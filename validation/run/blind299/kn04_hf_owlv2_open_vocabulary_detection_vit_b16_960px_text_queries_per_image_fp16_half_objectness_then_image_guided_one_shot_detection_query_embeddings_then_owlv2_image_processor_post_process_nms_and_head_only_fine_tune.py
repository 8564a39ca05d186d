"""Open-vocabulary object detection with OWLv2: an Owlv2ForObjectDetection from Owlv2Config (ViT-B/16
vision tower at 960 x 960, 3,600 patches; 12-layer text tower of 512 with 16-token queries; class,
box and objectness heads), weights in fp16 (.half()) for inference.

Phases: (1) model build + text-conditioned detection for 4 images x 6 text queries under inference_mode,
Owlv2ImageProcessor.post_process_object_detection with target sizes and the objectness logits' top-10;
(2) image-guided (one-shot) detection: each of 4 target images against a query image
(image_guided_detection), post_process_image_guided_detection with its NMS; (3) the image embeddings
computed once (image_embedder) and reused for three batches of new text queries through
class_predictor / box_predictor; (4) the heads only fine-tuned (class, box and objectness heads in fp32,
the backbone frozen in fp16 under no_grad) for 3 AdamW steps with a by-hand sigmoid focal + L1 loss
on the top-scoring boxes. 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29904)
if SMALL:
    cfg = Owlv2Config(
        text_config=dict(
            vocab_size=512,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=16,
            bos_token_id=510,
            eos_token_id=511,
        ),
        vision_config=dict(
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=64,
            patch_size=16,
        ),
        projection_dim=32,
    )
    IMGS, QUERIES, SEQ = 2, 3, 16
else:
    cfg = Owlv2Config(
        text_config=dict(max_position_embeddings=16),
        vision_config=dict(image_size=960, patch_size=16),
        projection_dim=512,
    )
    IMGS, QUERIES, SEQ = 4, 6, 16
SIZE = cfg.vision_config.image_size
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def text_queries(n_images, n_queries):
    """Tokenised prompts like 'a photo of a <thing>': bos, 3-8 tokens, eos, zero padding to SEQ."""
    ids = torch.zeros((n_images * n_queries, SEQ), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i in range(ids.shape[0]):
        k = int(torch.randint(3, 9, ()).item())
        ids[i, 0] = cfg.text_config.bos_token_id
        ids[i, 1 : k + 1] = torch.randint(3, cfg.text_config.vocab_size - 2, (k,))
        ids[i, k + 1] = cfg.text_config.eos_token_id
        mask[i, : k + 2] = 1
    return ids.to(device), mask.to(device)


def images(n):
    return torch.randn(n, 3, SIZE, SIZE, device=device, dtype=dtype)


processor = Owlv2ImageProcessor()
model = Owlv2ForObjectDetection(cfg).to(device=device, dtype=dtype).eval()
targets = torch.tensor([[SIZE, SIZE]] * IMGS, device=device)

with torch.inference_mode():
    ids, mask = text_queries(IMGS, QUERIES)
    out = model(input_ids=ids, attention_mask=mask, pixel_values=images(IMGS))
    results = processor.post_process_object_detection(out, threshold=0.0, target_sizes=targets)
    top_obj = out.objectness_logits.float().topk(10, dim=-1)
    print(
        f"text detection logits {tuple(out.logits.shape)} boxes {[len(r['boxes']) for r in results]} "
        f"objectness top {top_obj.values[:, 0].tolist()}"
    )
    del out, results
report("build and text-conditioned detection")

with torch.inference_mode():
    pixels, query_pixels = images(IMGS), images(IMGS)
    out = model.image_guided_detection(pixel_values=pixels, query_pixel_values=query_pixels)
    results = processor.post_process_image_guided_detection(
        out, threshold=0.0, nms_threshold=0.3, target_sizes=targets
    )
    print(f"image-guided logits {tuple(out.logits.shape)} kept {[len(r['boxes']) for r in results]}")
    del out, results
report("image-guided detection")

with torch.inference_mode():
    feature_map = model.image_embedder(pixel_values=images(IMGS))[0]
    b, h, w, d = feature_map.shape
    image_feats = feature_map.reshape(b, h * w, d)
    boxes = model.box_predictor(image_feats, feature_map)
    for round_ in range(3):
        ids, mask = text_queries(IMGS, QUERIES + 2 * round_)
        query_embeds = model.owlv2.get_text_features(input_ids=ids, attention_mask=mask)
        if not torch.is_tensor(query_embeds):
            query_embeds = query_embeds.pooler_output
        query_embeds = query_embeds.reshape(IMGS, QUERIES + 2 * round_, -1)
        query_mask = torch.ones(query_embeds.shape[:2], dtype=torch.bool, device=device)
        logits, _ = model.class_predictor(image_feats, query_embeds, query_mask)
        best = logits.float().sigmoid().amax(-1).topk(5, dim=-1)
        print(f"reuse round {round_} logits {tuple(logits.shape)} best {best.values[:, 0].tolist()}")
        del logits, query_embeds
    del feature_map, image_feats, boxes
report("embedding reuse with new queries")

heads = [model.class_head, model.box_head, model.objectness_head]
for head in heads:
    head.float()
params = [p for head in heads for p in head.parameters()]
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-4)
for step in range(3):
    with torch.no_grad():
        feature_map = model.image_embedder(pixel_values=images(2))[0]
        b, h, w, d = feature_map.shape
        ids, mask = text_queries(2, QUERIES)
        query_embeds = model.owlv2.get_text_features(input_ids=ids, attention_mask=mask)
        if not torch.is_tensor(query_embeds):
            query_embeds = query_embeds.pooler_output
    feats = feature_map.reshape(b, h * w, d).float()
    query_embeds = query_embeds.reshape(2, QUERIES, -1).float()
    logits, _ = model.class_predictor(feats, query_embeds, None)
    boxes = model.box_predictor(feats, feature_map.float())
    objectness = model.objectness_predictor(feats)
    target_cls = torch.zeros_like(logits)
    top = objectness.topk(8, dim=-1).indices
    target_cls[:, :, 0].scatter_(1, top, 1.0)  # the 8 most object-like patches are query 0's
    focal = logits.sigmoid()
    pt = torch.where(target_cls > 0, focal, 1 - focal)
    bce = F.binary_cross_entropy_with_logits(logits, target_cls, reduction="none")
    cls_loss = (bce * (1 - pt) ** 2).mean()
    box_target = torch.rand(2, top.shape[1], 4, device=device)
    box_loss = F.l1_loss(boxes.gather(1, top.unsqueeze(-1).expand(-1, -1, 4)), box_target)
    obj_loss = F.binary_cross_entropy_with_logits(objectness, target_cls[:, :, 0])
    loss = cls_loss + 5 * box_loss + obj_loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"head step {step} loss {loss.item():.4f}")
    del feature_map, feats, logits, boxes, objectness, loss
report("head-only fine-tune")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
