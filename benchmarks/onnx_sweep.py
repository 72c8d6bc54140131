"""A wider check of the ONNX frontend than the zoo: a hundred more models, and
a second group of families the first hundred lack (``BEYOND``).

    python benchmarks/onnx_sweep.py                    # every model
    python benchmarks/onnx_sweep.py falcon mpnet fcn   # some of them
    python benchmarks/onnx_sweep.py --beyond           # the second group only
    python benchmarks/onnx_sweep.py --list
    python benchmarks/onnx_sweep.py --dynamo           # torch.export-based exporter
    python benchmarks/onnx_sweep.py --time bert vit    # and jitnn's speed over ORT's

Each model is built from its library's definition (transformers, timm,
torchvision; the second group also diffusers and ultralytics: detectors, DETR
family, YOLO, segmentation heads, SAM's encoder, diffusion U-Nets and a VAE,
video networks, RAFT, encoder-decoders, more timm families) in a small
configuration with seeded random weights (``jitnn.bench.zoo.randomize``;
batch-norm statistics calibrated on random images), exported by
``torch.onnx.export`` (TorchScript, opset 17, dynamic batch and sequence axes;
``--dynamo``: the ``torch.export``-based exporter, torch's default, opset 18,
the same axes dynamic, files of their own) to ``--out`` (default
``$JITNN_NETWORKS_DIR/sweep`` or ``~/.cache/jitnn/networks/sweep``, never the
repository), then run by ONNX Runtime and by ``jitnn.onnx`` (1 thread) on the
same inputs: two token inputs for the text models, one input otherwise (the
second group: each model's own, such as RAFT's two images or a U-Net's latents
and text encoding). One row per model: ``pass`` with the largest difference
over the largest output magnitude (below 1e-3), or what failed (the export,
loading: jitnn's error, or the numbers; a NaN or inf where ONNX Runtime's
output has a number fails). ``--time`` adds both engines' median time on 1
thread, alternated in one process (the small configurations: a measure of
per-step costs more than of kernels; ``jitnn bench zoo`` times full sizes). Each model runs in its own process (``--in-process``:
not), so that one that crashes or exhausts memory leaves the
others. docs/onnx.md has the results. Needs torch 2.13 (CPU), transformers,
timm, torchvision, onnx and onnxruntime (the second group: diffusers and
ultralytics too).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# not this folder (its torch.py would be found for PyTorch), the repository instead
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.path.dirname(HERE))

from jitnn.bench import zoo  # noqa: E402
from jitnn.bench.zoo import Built, _image, _seeded, _text, token_inputs  # noqa: E402

#: a model's output differs from ONNX Runtime's by less than this, over its largest magnitude
TOLERANCE = 1e-3


# --- the definitions -------------------------------------------------------------------

def _wrapped(inner, call):
    """``inner`` as a module of one input tensor and one output (``call(inner, x)``)."""
    from torch import nn

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return call(self.inner, x)

    return Wrapped().eval()


def _pixels(model, size: int, output: str = "last_hidden_state",
            call=lambda m, x: m(pixel_values=x, return_dict=True).last_hidden_state) -> Built:
    built = _image(_wrapped(model, call), size, batch=2, output=output)
    built.example = {"pixel_values": built.example.pop("input")}
    built.dynamic_axes = {"pixel_values": {0: "batch"}, output: {0: "batch"}}
    return built


def _audio(model, shape) -> Built:
    module = _wrapped(model, lambda m, x: m(x, return_dict=True).last_hidden_state)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return Built(module, {"input_values": x}, ["last_hidden_state"],
                 {"input_values": {0: "batch"}, "last_hidden_state": {0: "batch"}})


def _hf(config: str, model: str, text: bool = True, pooling: bool | None = None, **options):
    """A transformers model of ``config`` class with small defaults and ``options``."""
    t = zoo._transformers()
    base = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, vocab_size=128, max_position_embeddings=64)
    base.update(options)
    cfg = getattr(t, config)(**base)
    cfg.use_cache = False
    kwargs = {} if pooling is None else {"add_pooling_layer": pooling}
    module = _seeded(lambda: getattr(t, model)(cfg, **kwargs))
    return _text(module, 128, True) if text else module


_WAVE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)


#: a small Whisper, its layer counts apart
_WHISPER = dict(d_model=64, encoder_attention_heads=2, decoder_attention_heads=2,
                encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                max_source_positions=16, vocab_size=128, pad_token_id=0, bos_token_id=0,
                eos_token_id=0, decoder_start_token_id=0, max_target_positions=16)


def whisper_encoder() -> Built:
    t = zoo._transformers()
    cfg = t.WhisperConfig(**_WHISPER, encoder_layers=2, decoder_layers=1)
    encoder = _seeded(lambda: t.WhisperModel(cfg)).encoder
    module = _wrapped(encoder, lambda m, x: m(x, return_dict=True).last_hidden_state)
    x = np.random.default_rng(0).standard_normal((2, 16, 32)).astype(np.float32)
    return Built(module, {"input_features": x}, ["last_hidden_state"],
                 {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}})


def segformer() -> Built:
    t = zoo._transformers()
    cfg = t.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2],
                            hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                            patch_sizes=[7, 3], strides=[4, 2], decoder_hidden_size=32,
                            num_labels=5)
    return _pixels(_seeded(lambda: t.SegformerForSemanticSegmentation(cfg)), 64, "logits",
                   lambda m, x: m(pixel_values=x, return_dict=True).logits)


def dpt() -> Built:
    t = zoo._transformers()
    cfg = t.DPTConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                      intermediate_size=128, image_size=32, patch_size=8,
                      backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 32, 64, 64],
                      fusion_hidden_size=32, reassemble_factors=[4, 2, 1, 0.5])
    return _pixels(_seeded(lambda: t.DPTForDepthEstimation(cfg)), 32, "depth",
                   lambda m, x: m(pixel_values=x, return_dict=True).predicted_depth)


def mobilevit() -> Built:
    t = zoo._transformers()
    cfg = t.MobileViTConfig(image_size=64, hidden_sizes=[32, 40, 48], num_attention_heads=2,
                            neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64])
    return _pixels(_seeded(lambda: t.MobileViTModel(cfg, expand_output=False)), 64)


def _vision(config: str, model: str, size: int = 32, **options) -> Built:
    t = zoo._transformers()
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128, image_size=size, patch_size=8)
    base.update(options)
    cfg = getattr(t, config)(**base)
    kwargs = {} if model in ("CLIPVisionModel", "Dinov2Model") else {"add_pooling_layer": False}
    return _pixels(_seeded(lambda: getattr(t, model)(cfg, **kwargs)), size)


def _timm(name: str, size: int = 64, **options) -> Built:
    timm = zoo._timm()
    return _image(_seeded(lambda: timm.create_model(name, pretrained=False, **options)), size)


def _torchvision(name: str, size: int = 64, **options) -> Built:
    tv = zoo.import_torchvision()
    return _image(_seeded(lambda: getattr(tv.models, name)(weights=None, **options)), size)


def _segmentation(name: str) -> Built:
    tv = zoo.import_torchvision()
    model = _seeded(lambda: getattr(tv.models.segmentation, name)(
        weights=None, weights_backbone=None, num_classes=5))
    return _image(_wrapped(model, lambda m, x: m(x)["out"]), 64, output="out")


def r3d_18() -> Built:
    zoo.import_torchvision()
    from torchvision.models import video
    module = _seeded(lambda: video.r3d_18(weights=None, num_classes=10))
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 32, 32)).astype(np.float32)
    return Built(module, {"input": x}, ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


def vit_torchvision() -> Built:
    """torchvision's VisionTransformer (nn.MultiheadAttention), 2 layers (ViT-B/16's 12 layers
    with random weights are chaotic: PyTorch's float32 differs from its float64 by 23 %)."""
    zoo.import_torchvision()
    from torchvision.models.vision_transformer import VisionTransformer
    return _image(_seeded(lambda: VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
        num_classes=10)), 32)


#: name -> (library, builder)
MODELS = {
    # transformers: encoders
    "distilbert": ("transformers", lambda: _hf("DistilBertConfig", "DistilBertModel", dim=64,
                                               n_layers=2, n_heads=2, hidden_dim=128)),
    "roberta": ("transformers", lambda: _hf("RobertaConfig", "RobertaModel", pooling=False)),
    "albert": ("transformers", lambda: _hf("AlbertConfig", "AlbertModel", pooling=False,
                                           embedding_size=32)),
    "electra": ("transformers", lambda: _hf("ElectraConfig", "ElectraModel", embedding_size=32)),
    "mpnet": ("transformers", lambda: _hf("MPNetConfig", "MPNetModel", pooling=False)),
    "deberta_v2": ("transformers", lambda: _hf(
        "DebertaV2Config", "DebertaV2Model", relative_attention=True, position_buckets=16,
        pos_att_type=["p2c", "c2p"], max_relative_positions=32)),
    "squeezebert": ("transformers", lambda: _hf(
        "SqueezeBertConfig", "SqueezeBertModel", embedding_size=64, q_groups=2, k_groups=2,
        v_groups=2, post_attention_groups=2, intermediate_groups=2, output_groups=2)),
    "convbert": ("transformers", lambda: _hf("ConvBertConfig", "ConvBertModel",
                                             embedding_size=64, conv_kernel_size=5)),
    "mobilebert": ("transformers", lambda: _hf(
        "MobileBertConfig", "MobileBertModel", pooling=False, embedding_size=32,
        intra_bottleneck_size=32, true_hidden_size=32, num_feedforward_networks=2)),
    "t5_encoder": ("transformers", lambda: _hf(
        "T5Config", "T5EncoderModel", d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
        feed_forward_proj="gated-gelu")),
    "clip_text": ("transformers", lambda: _hf("CLIPTextConfig", "CLIPTextModel")),
    # transformers: decoders
    "mistral": ("transformers", lambda: _hf("MistralConfig", "MistralModel",
                                            num_key_value_heads=2, sliding_window=8)),
    "qwen2": ("transformers", lambda: _hf("Qwen2Config", "Qwen2Model", num_key_value_heads=2)),
    "gemma": ("transformers", lambda: _hf("GemmaConfig", "GemmaModel", num_key_value_heads=1,
                                          head_dim=16, hidden_activation="gelu_pytorch_tanh")),
    "phi": ("transformers", lambda: _hf("PhiConfig", "PhiModel", partial_rotary_factor=0.5)),
    "falcon": ("transformers", lambda: _hf("FalconConfig", "FalconModel", multi_query=True,
                                           new_decoder_architecture=False, alibi=False)),
    "gpt_neox": ("transformers", lambda: _hf("GPTNeoXConfig", "GPTNeoXModel", rotary_pct=0.25)),
    "gptj": ("transformers", lambda: _hf("GPTJConfig", "GPTJModel", n_embd=64, n_layer=2,
                                         n_head=4, n_positions=64, rotary_dim=8)),
    "opt": ("transformers", lambda: _hf("OPTConfig", "OPTModel", ffn_dim=128,
                                        word_embed_proj_dim=64, pad_token_id=0, bos_token_id=0,
                                        eos_token_id=0)),
    "bloom": ("transformers", lambda: _hf("BloomConfig", "BloomModel", n_layer=2, n_head=4)),
    # transformers: audio and vision
    "whisper_encoder": ("transformers", whisper_encoder),
    "wav2vec2": ("transformers", lambda: _audio(_hf(
        "Wav2Vec2Config", "Wav2Vec2Model", text=False, **_WAVE, feat_extract_norm="group"),
        (2, 800))),
    "hubert": ("transformers", lambda: _audio(_hf(
        "HubertConfig", "HubertModel", text=False, **_WAVE, feat_extract_norm="layer",
        do_stable_layer_norm=True), (2, 800))),
    "wavlm": ("transformers", lambda: _audio(_hf(
        "WavLMConfig", "WavLMModel", text=False, **_WAVE, num_buckets=16,
        max_bucket_distance=32), (2, 800))),
    "data2vec_audio": ("transformers", lambda: _audio(_hf(
        "Data2VecAudioConfig", "Data2VecAudioModel", text=False,
        **{**_WAVE, "num_conv_pos_embeddings": 5}, conv_pos_kernel_size=5), (2, 800))),
    "clip_vision": ("transformers", lambda: _vision("CLIPVisionConfig", "CLIPVisionModel")),
    "deit": ("transformers", lambda: _vision("DeiTConfig", "DeiTModel")),
    "beit": ("transformers", lambda: _vision("BeitConfig", "BeitModel",
                                             use_relative_position_bias=True)),
    # (the position embeddings of a 56-pixel image, interpolated for 42 pixels: bicubic)
    "dinov2": ("transformers", lambda: _vision("Dinov2Config", "Dinov2Model", size=42,
                                               image_size=56, patch_size=14)),
    "mobilevit": ("transformers", mobilevit),
    "segformer": ("transformers", segformer),
    "dpt": ("transformers", dpt),
    # timm
    **{name: ("timm", lambda model=model, size=size, options=options:
              _timm(model, size, **options))
       for name, (model, size, options) in {
           "resnet50d": ("resnet50d", 64, {}), "mobilenetv3_small": ("mobilenetv3_small_050", 64, {}),
           "efficientnet_b1": ("efficientnet_b1", 64, {}), "hgnetv2": ("hgnetv2_b0", 64, {}),
           "mobileone": ("mobileone_s0", 64, {}), "ghostnet": ("ghostnet_050", 64, {}),
           "ghostnetv2": ("ghostnetv2_100", 64, {}), "densenet121": ("densenet121", 64, {}),
           "dpn68": ("dpn68", 64, {}), "cspdarknet53": ("cspdarknet53", 64, {}),
           "convnextv2": ("convnextv2_atto", 64, {}), "poolformer": ("poolformer_s12", 64, {}),
           "levit": ("levit_128s", 64, {"img_size": 64}),
           "mixer": ("mixer_s16_224", 64, {"img_size": 64}), "repvgg": ("repvgg_a0", 64, {}),
           "regnetx": ("regnetx_002", 64, {}), "mnasnet": ("mnasnet_small", 64, {}),
           "inception_v3": ("inception_v3", 96, {}), "xception": ("xception41", 64, {}),
           "res2net": ("res2net50_14w_8s", 64, {}), "resnest": ("resnest14d", 64, {}),
           "sknet": ("skresnet18", 64, {}), "efficientformer": ("efficientformer_l1", 224, {}),
           "edgenext": ("edgenext_xx_small", 64, {}),
           "coatnet": ("coatnet_nano_rw_224", 64, {"img_size": 64}),
           "maxvit": ("maxvit_nano_rw_256", 64, {"img_size": 64}), "pvt_v2": ("pvt_v2_b0", 64, {}),
           "vit": ("vit_tiny_patch16_224", 64, {"img_size": 64}),
           "deit_distilled": ("deit_tiny_distilled_patch16_224", 64, {"img_size": 64}),
           "cait": ("cait_xxs24_224", 64, {"img_size": 64}), "crossvit": ("crossvit_tiny_240", 240, {}),
           "fastvit": ("fastvit_t8", 64, {}), "fastvit_mci": ("fastvit_mci0", 64, {}),
           "tinynet": ("tinynet_e", 64, {}), "lcnet": ("lcnet_050", 64, {}),
           "rexnet": ("rexnet_100", 64, {}), "nf_resnet": ("nf_resnet26", 64, {}),
           "vovnet": ("ese_vovnet19b_dw", 64, {}), "dla": ("dla34", 64, {}),
           "hrnet": ("hrnet_w18_small", 64, {}), "efficientvit": ("efficientvit_b0", 64, {}),
           "mobilevitv2": ("mobilevitv2_050", 64, {}), "tresnet": ("tresnet_m", 64, {}),
           "gcvit": ("gcvit_xxtiny", 64, {"img_size": 64}), "nest": ("nest_tiny", 64, {"img_size": 64}),
           "twins": ("twins_svt_small", 64, {}), "convmixer": ("convmixer_768_32", 64, {}),
           "resmlp": ("resmlp_12_224", 64, {"img_size": 64}),
           "gmlp": ("gmlp_ti16_224", 64, {"img_size": 64}), "sequencer": ("sequencer2d_s", 64, {}),
           "selecsls": ("selecsls42b", 64, {}), "hardcorenas": ("hardcorenas_a", 64, {}),
           "mobilenetv4": ("mobilenetv4_conv_small", 64, {}),
           "swinv2": ("swinv2_cr_tiny_ns_224", 64, {"img_size": 64}),
           "focalnet": ("focalnet_tiny_srf", 64, {}), "inception_next": ("inception_next_tiny", 64, {}),
           "rdnet": ("rdnet_tiny", 64, {}),
       }.items()},
    # torchvision
    "squeezenet": ("torchvision", lambda: _torchvision("squeezenet1_1")),
    "googlenet": ("torchvision", lambda: _torchvision("googlenet", aux_logits=False,
                                                      init_weights=False)),
    "resnext50": ("torchvision", lambda: _torchvision("resnext50_32x4d")),
    "wide_resnet50": ("torchvision", lambda: _torchvision("wide_resnet50_2")),
    "regnet_y_400mf": ("torchvision", lambda: _torchvision("regnet_y_400mf")),
    "swin_v2_t": ("torchvision", lambda: _torchvision("swin_v2_t")),
    "maxvit_t": ("torchvision", lambda: _torchvision("maxvit_t", 224)),
    "vit_torchvision": ("torchvision", vit_torchvision),
    "lraspp": ("torchvision", lambda: _segmentation("lraspp_mobilenet_v3_large")),
    "fcn": ("torchvision", lambda: _segmentation("fcn_resnet50")),
    "r3d_18": ("torchvision", r3d_18),
}


# --- beyond the first hundred: detection, segmentation, generative, video, seq2seq ------

def _outputs(model, call, example: dict[str, np.ndarray], outputs: list[str],
             batch_axes: bool = True) -> Built:
    """``model`` as a module of ``example``'s inputs (in order) returning ``outputs``
    (``call(model, *inputs)``, a tensor or a tuple of them); batch axes dynamic."""
    from torch import nn

    class Wrapped(nn.Module):               # (named arguments: torch.export's dynamic shapes
        def __init__(self):                 # follow the signature)
            super().__init__()
            self.inner = model

        def forward(self, first, second=None):
            return call(self.inner, first) if second is None else call(self.inner, first, second)

    if len(example) > 2:
        raise ValueError(f"{len(example)} inputs: a wrapped model takes one or two")
    axes = {n: {0: "batch"} for n in [*example, *outputs]} if batch_axes else {}
    return Built(Wrapped().eval(), example, outputs, axes)


def _detector(config: str, model: str, size: int = 64, **options) -> Built:
    """A transformers object detector: ``(logits, pred_boxes)`` of a ``size`` image."""
    t = zoo._transformers()
    cfg = getattr(t, config)(**options)
    detector = _seeded(lambda: getattr(t, model)(cfg))
    x = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    zoo.calibrate_batch_norms(detector, np.random.default_rng(2).standard_normal(
        (4, 3, size, size)).astype(np.float32))

    def call(m, pixels):
        out = m(pixel_values=pixels, return_dict=True)
        return out.logits, out.pred_boxes
    return _outputs(detector, call, {"pixel_values": x}, ["logits", "pred_boxes"])


def _small_resnet(**options):
    t = zoo._transformers()
    return t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1],
                          layer_type="basic", **options)


_DETR = dict(use_timm_backbone=False, use_pretrained_backbone=False, d_model=32,
             encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
             decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=8,
             num_labels=5)


def yolos() -> Built:
    return _detector("YolosConfig", "YolosForObjectDetection", 32, hidden_size=64,
                     num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                     image_size=[32, 32], patch_size=8, num_detection_tokens=8, num_labels=5)


def rt_detr() -> Built:
    t = zoo._transformers()
    backbone = t.RTDetrResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48, 64],
                                    depths=[1, 1, 1, 1], layer_type="basic",
                                    out_features=["stage2", "stage3", "stage4"])
    return _detector("RTDetrConfig", "RTDetrForObjectDetection", 64, backbone_config=backbone,
                     use_pretrained_backbone=False, encoder_in_channels=[32, 48, 64],
                     encoder_hidden_dim=32, encoder_ffn_dim=64, d_model=32, decoder_layers=2,
                     decoder_in_channels=[32, 32, 32], decoder_ffn_dim=64, num_queries=8,
                     num_labels=5, num_denoising=0, encoder_attention_heads=2,
                     decoder_attention_heads=2, decoder_n_points=2, anchor_image_size=[64, 64])


def yolo(config: str) -> Built:
    """Ultralytics YOLO built from its yaml (no download): the decoded (box, class) rows."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from ultralytics import YOLO
        model = _seeded(lambda: YOLO(config).model.float().eval())
    for layer in model.modules():                   # the exporter's form of the head
        if hasattr(layer, "export"):
            layer.export = True
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    zoo.calibrate_batch_norms(model, np.random.default_rng(2).standard_normal(
        (4, 3, 64, 64)).astype(np.float32))
    return _outputs(model, lambda m, image: m(image), {"images": x}, ["output0"])


def upernet() -> Built:
    t = zoo._transformers()
    cfg = t.UperNetConfig(backbone_config=t.ConvNextConfig(
        hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1],
        out_features=["stage1", "stage2", "stage3", "stage4"]), hidden_size=32,
        use_auxiliary_head=False, num_labels=5)
    # (192 px: the pyramid pooling's 1, 2, 3 and 6 cells divide stage 4's 6 x 6)
    return _pixels(_seeded(lambda: t.UperNetForSemanticSegmentation(cfg)), 192, "logits",
                   lambda m, x: m(pixel_values=x, return_dict=True).logits)


def mask2former() -> Built:
    t = zoo._transformers()
    backbone = t.SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1],
                            num_heads=[1, 2, 2, 4], window_size=4,
                            out_features=["stage1", "stage2", "stage3", "stage4"])
    cfg = t.Mask2FormerConfig(backbone_config=backbone, use_pretrained_backbone=False,
                              feature_size=32, mask_feature_size=32, hidden_dim=32,
                              encoder_feedforward_dim=64, dim_feedforward=64, encoder_layers=1,
                              decoder_layers=2, num_attention_heads=2, num_queries=8,
                              num_labels=5, common_stride=4)
    return _detector_masks(_seeded(lambda: t.Mask2FormerForUniversalSegmentation(cfg)))


def _detector_masks(model) -> Built:
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)

    def call(m, pixels):
        out = m(pixel_values=pixels, return_dict=True)
        return out.class_queries_logits, out.masks_queries_logits
    return _outputs(model, call, {"pixel_values": x}, ["class_logits", "mask_logits"])


def sam_vision() -> Built:
    t = zoo._transformers()
    cfg = t.SamVisionConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                            image_size=64, patch_size=8, output_channels=32, window_size=4,
                            global_attn_indexes=[1], mlp_dim=128)
    return _pixels(_seeded(lambda: t.SamVisionModel(cfg)), 64)


def _diffusers():
    zoo.import_torchvision()                    # before diffusers imports it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import diffusers
    return diffusers


def unet2d() -> Built:
    """diffusers' UNet2DModel (GroupNorm, SiLU, timestep embedding, attention, up-sampling)
    at timestep 10."""
    d = _diffusers()
    model = _seeded(lambda: d.UNet2DModel(
        sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(16, 32), norm_num_groups=8, attention_head_dim=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D")))
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    return _outputs(model, lambda m, sample: m(sample, 10).sample, {"sample": x}, ["out"])


def unet2d_condition() -> Built:
    """diffusers' UNet2DConditionModel (cross-attention to a text encoding) at timestep 10."""
    d = _diffusers()
    model = _seeded(lambda: d.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(16, 32), norm_num_groups=8, cross_attention_dim=24,
        attention_head_dim=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")))
    rng = np.random.default_rng(0)
    example = {"sample": rng.standard_normal((2, 4, 16, 16)).astype(np.float32),
               "encoder_hidden_states": rng.standard_normal((2, 6, 24)).astype(np.float32)}
    return _outputs(model, lambda m, sample, text: m(sample, 10, text).sample, example, ["out"])


def autoencoder_kl() -> Built:
    """diffusers' AutoencoderKL: encode, the posterior's mode, decode."""
    d = _diffusers()
    model = _seeded(lambda: d.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
        block_out_channels=(16, 32), norm_num_groups=8, sample_size=32,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2))
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    return _outputs(model, lambda m, sample: m(sample, sample_posterior=False).sample,
                    {"sample": x}, ["out"])


def _video(name: str, shape=(1, 3, 8, 32, 32), **options) -> Built:
    zoo.import_torchvision()
    from torchvision.models import video
    module = _seeded(lambda: getattr(video, name)(weights=None, num_classes=10, **options))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    zoo.calibrate_batch_norms(module, np.random.default_rng(2).standard_normal(
        (2, *shape[1:])).astype(np.float32))
    return Built(module, {"input": x}, ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


def raft_small() -> Built:
    """torchvision's RAFT (small): correlation pyramid, grid_sample lookups, 2 GRU updates."""
    zoo.import_torchvision()
    from torchvision.models.optical_flow import raft_small as make
    model = _seeded(lambda: make(weights=None))
    rng = np.random.default_rng(0)
    example = {"image1": rng.standard_normal((1, 3, 128, 128)).astype(np.float32),
               "image2": rng.standard_normal((1, 3, 128, 128)).astype(np.float32)}
    return _outputs(model, lambda m, a, b: m(a, b, num_flow_updates=2)[-1], example, ["flow"])


def _seq2seq(config: str, model: str, **options) -> Built:
    """An encoder-decoder in one pass: the decoder reads the input ids shifted right
    (BART's default) or, when the model has no such default, the input ids themselves."""
    t = zoo._transformers()
    cfg = getattr(t, config)(vocab_size=128, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                             decoder_start_token_id=0, **options)
    cfg.use_cache = False
    module = _seeded(lambda: getattr(t, model)(cfg))
    built = _text(module, 128, True)

    def call(m, ids, mask):
        return m(input_ids=ids, attention_mask=mask, decoder_input_ids=ids,
                 return_dict=True).last_hidden_state
    built.module = _outputs(module, call, built.example, built.outputs).module
    return built


def _hf_own(config: str, model: str, **options) -> Built:
    """A transformers text model whose configuration takes none of :func:`_hf`'s defaults
    but the vocabulary (Funnel's layers are its block sizes, XLNet has no positions)."""
    t = zoo._transformers()
    cfg = getattr(t, config)(vocab_size=128, **options)
    cfg.use_cache = False
    return _text(_seeded(lambda: getattr(t, model)(cfg)), 128, True)


_BART = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
             max_position_embeddings=64)


def whisper() -> Built:
    """transformers' WhisperModel: the encoder and one pass of the decoder over 6 tokens."""
    t = zoo._transformers()
    cfg = t.WhisperConfig(**_WHISPER, encoder_layers=1, decoder_layers=2)
    cfg.use_cache = False
    model = _seeded(lambda: t.WhisperModel(cfg))
    rng = np.random.default_rng(0)
    example = {"input_features": rng.standard_normal((2, 16, 32)).astype(np.float32),
               "decoder_input_ids": rng.integers(0, 128, (2, 6)).astype(np.int64)}
    # (a decoder mask of ones: without one, transformers looks for packed sequences in the
    # positions by torch.diff, which the TorchScript exporter does not export)
    return _outputs(model, lambda m, features, ids: m(
        input_features=features, decoder_input_ids=ids, decoder_attention_mask=ids * 0 + 1,
        return_dict=True).last_hidden_state, example, ["last_hidden_state"])


def swin2sr() -> Built:
    """transformers' Swin2SR: Swin-V2 blocks, a pixel-shuffle (DepthToSpace) 2x upsampler."""
    t = zoo._transformers()
    cfg = t.Swin2SRConfig(image_size=32, patch_size=1, embed_dim=16, depths=[1, 1],
                          num_heads=[2, 2], window_size=4, upscale=2, upsampler="pixelshuffle")
    return _pixels(_seeded(lambda: t.Swin2SRForImageSuperResolution(cfg)), 32, "reconstruction",
                   lambda m, x: m(pixel_values=x, return_dict=True).reconstruction)


def encodec() -> Built:
    """transformers' EnCodec: 1-D conv encoder with an LSTM, residual vector quantization
    (nearest code by ArgMin), decoder."""
    t = zoo._transformers()
    cfg = t.EncodecConfig(num_filters=4, hidden_size=16, codebook_size=32, codebook_dim=16,
                          num_residual_layers=1, upsampling_ratios=[4, 2], num_lstm_layers=1,
                          target_bandwidths=[10.0], sampling_rate=8000, audio_channels=1)
    model = _seeded(lambda: t.EncodecModel(cfg))
    x = np.random.default_rng(0).standard_normal((2, 1, 400)).astype(np.float32)
    return _outputs(model, lambda m, audio: m(audio, return_dict=True).audio_values,
                    {"input_values": x}, ["audio_values"])


#: name -> (library, builder): families the first hundred lack (detection, segmentation,
#: generative, video, optical flow, encoder-decoders). Not here: torchvision's detectors
#: (SSDlite, RetinaNet, FCOS, Faster R-CNN), whose post-processing neither exporter exports
#: (TorchScript: torchvision's compiled NMS is missing with the CPU torch; torch.export: NMS's
#: data-dependent box counts)
BEYOND = {
    "detr": ("transformers", lambda: _detector(
        "DetrConfig", "DetrForObjectDetection", backbone_config=_small_resnet(
            out_features=["stage4"]), **_DETR)),
    "conditional_detr": ("transformers", lambda: _detector(
        "ConditionalDetrConfig", "ConditionalDetrForObjectDetection",
        backbone_config=_small_resnet(out_features=["stage4"]), **_DETR)),
    "yolos": ("transformers", yolos),
    "rt_detr": ("transformers", rt_detr),
    "yolov8n": ("ultralytics", lambda: yolo("yolov8n.yaml")),
    "yolo11n": ("ultralytics", lambda: yolo("yolo11n.yaml")),
    "deeplabv3_resnet50": ("torchvision", lambda: _segmentation("deeplabv3_resnet50")),
    "deeplabv3_mobilenet": ("torchvision", lambda: _segmentation(
        "deeplabv3_mobilenet_v3_large")),
    "upernet": ("transformers", upernet),
    "mask2former": ("transformers", mask2former),
    "sam_vision": ("transformers", sam_vision),
    "unet2d": ("diffusers", unet2d),
    "unet2d_condition": ("diffusers", unet2d_condition),
    "autoencoder_kl": ("diffusers", autoencoder_kl),
    "mc3_18": ("torchvision", lambda: _video("mc3_18")),
    "r2plus1d_18": ("torchvision", lambda: _video("r2plus1d_18")),
    "s3d": ("torchvision", lambda: _video("s3d", (1, 3, 16, 224, 224))),
    "mvit_v2_s": ("torchvision", lambda: _video("mvit_v2_s", (1, 3, 16, 224, 224))),
    "swin3d_t": ("torchvision", lambda: _video("swin3d_t", (1, 3, 8, 64, 64))),
    "raft_small": ("torchvision", raft_small),
    "bart": ("transformers", lambda: _seq2seq("BartConfig", "BartModel", **_BART)),
    "mbart": ("transformers", lambda: _seq2seq("MBartConfig", "MBartModel", **_BART)),
    "marian": ("transformers", lambda: _seq2seq("MarianConfig", "MarianModel", **_BART)),
    "pegasus": ("transformers", lambda: _seq2seq("PegasusConfig", "PegasusModel", **_BART)),
    "t5": ("transformers", lambda: _seq2seq(
        "T5Config", "T5Model", d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)),
    "whisper": ("transformers", whisper),
    "esm": ("transformers", lambda: _hf("EsmConfig", "EsmModel", pooling=False,
                                        position_embedding_type="rotary", pad_token_id=1,
                                        token_dropout=False)),
    "deformable_detr": ("transformers", lambda: _detector(
        "DeformableDetrConfig", "DeformableDetrForObjectDetection",
        backbone_config=_small_resnet(out_features=["stage2", "stage3", "stage4"]),
        **{**_DETR, "decoder_n_points": 2, "encoder_n_points": 2, "num_feature_levels": 3})),
    "gpt_bigcode": ("transformers", lambda: _hf("GPTBigCodeConfig", "GPTBigCodeModel", n_embd=64,
                                                n_layer=2, n_head=4, n_positions=64,
                                                multi_query=True)),
    "funnel": ("transformers", lambda: _hf_own("FunnelConfig", "FunnelBaseModel", d_model=64,
                                               n_head=4, d_head=16, d_inner=128,
                                               block_sizes=[1, 1], num_decoder_layers=1)),
    "xlnet": ("transformers", lambda: _hf_own("XLNetConfig", "XLNetModel", d_model=64,
                                              n_layer=2, n_head=4, d_inner=128)),
    "swin2sr": ("transformers", swin2sr),
    "encodec": ("transformers", encodec),
    "mamba": ("transformers", lambda: _hf_own("MambaConfig", "MambaModel", hidden_size=64,
                                              num_hidden_layers=2, state_size=8, expand=2)),
    "ast": ("transformers", lambda: _audio(_hf(
        "ASTConfig", "ASTModel", text=False, num_mel_bins=16, max_length=32, patch_size=8,
        frequency_stride=8, time_stride=8), (2, 32, 16))),
    # timm families the first hundred lack
    **{name: ("timm", lambda model=model, size=size, options=options:
              _timm(model, size, **options))
       for name, (model, size, options) in {
           "efficientnetv2": ("efficientnetv2_rw_t", 64, {}), "regnetz": ("regnetz_b16", 64, {}),
           "repvit": ("repvit_m0_9", 64, {}), "davit": ("davit_tiny", 64, {}),
           "xcit": ("xcit_nano_12_p16_224", 64, {"img_size": 64}),
           "pit": ("pit_ti_224", 64, {"img_size": 64}),
           "convit": ("convit_tiny", 64, {"img_size": 64}),
           "tnt": ("tnt_s_patch16_224", 64, {"img_size": 64}),
           "volo": ("volo_d1_224", 64, {"img_size": 64}),
           "hiera": ("hiera_tiny_224", 64, {"img_size": 64}),
           "halonet": ("halonet26t", 256, {}), "botnet": ("botnet26t_256", 256, {}),
           "lambda_resnet": ("lambda_resnet26t", 64, {}), "nfnet": ("dm_nfnet_f0", 64, {}),
           "coat": ("coat_tiny", 64, {"img_size": 64}),
           "tiny_vit": ("tiny_vit_5m_224", 64, {}),
           "efficientvit_m": ("efficientvit_m0", 64, {"img_size": 64}),
           "mambaout": ("mambaout_femto", 64, {}), "starnet": ("starnet_s1", 64, {}),
           "fasternet": ("fasternet_t0", 64, {}), "ghostnetv3": ("ghostnetv3_050", 64, {}),
           "gernet": ("gernet_s", 64, {}), "bit": ("resnetv2_50x1_bit", 64, {}),
           "nextvit": ("nextvit_small", 64, {}), "caformer": ("caformer_s18", 64, {}),
           "efficientformerv2": ("efficientformerv2_s0", 64, {"img_size": 64}),
           "mvitv2_timm": ("mvitv2_tiny", 64, {"img_size": 64}),
           "inception_v4": ("inception_v4", 96, {}),
           "visformer": ("visformer_tiny", 64, {"img_size": 64}),
           "vitamin": ("vitamin_small_224", 64, {"img_size": 64}),
           "cspresnext": ("cspresnext50", 64, {}), "sebotnet": ("sebotnet33ts_256", 256, {}),
           "resnetrs": ("resnetrs50", 64, {}), "gcresnet": ("gcresnet33ts", 64, {}),
           "mixnet": ("mixnet_s", 64, {}), "fbnetv3": ("fbnetv3_b", 64, {}),
       }.items()},
    "efficientnet_v2_torchvision": ("torchvision", lambda: _torchvision("efficientnet_v2_s")),
    "convnext_torchvision": ("torchvision", lambda: _torchvision("convnext_tiny")),
}
MODELS.update(BEYOND)

# --- export and compare --------------------------------------------------------------

def out_dir() -> str:
    root = os.path.join(zoo.cache_dir(), os.pardir, "sweep")
    return os.path.normpath(root)


def export(name: str, folder: str, dynamo: bool = False) -> tuple[str, list[dict]]:
    """Export model ``name`` into ``folder`` (once; ``dynamo``: by the ``torch.export``-based
    exporter, to a file of its own); returns its path and input sets."""
    import torch
    built = MODELS[name][1]()
    path = os.path.join(folder, f"{name}{'-dynamo' if dynamo else ''}.onnx")
    feeds = [built.example]
    if built.vocab:
        batch, sequence = zoo.TEXT_SHAPES[True]
        feeds.append(token_inputs(built.vocab, batch, sequence, seed=8))
    if not os.path.exists(path):
        names = list(built.example)
        args = tuple(torch.from_numpy(built.example[n]) for n in names)
        tmp = f"{path}.tmp{os.getpid()}"
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            if dynamo:
                dynamic = tuple({axis: torch.export.Dim.DYNAMIC
                                 for axis in built.dynamic_axes.get(n, {})} for n in names)
                torch.onnx.export(built.module, args, tmp, dynamo=True, opset_version=18,
                                  input_names=names, output_names=built.outputs,
                                  dynamic_shapes=dynamic, external_data=False)
            else:
                torch.onnx.export(built.module, args, tmp, dynamo=False, opset_version=17,
                                  input_names=names, output_names=built.outputs,
                                  dynamic_axes=built.dynamic_axes)
        os.replace(tmp, path)
    return path, feeds


def time_both(session, model, feed: dict, budget_s: float = 2.0) -> dict:
    """Medians of ONNX Runtime's and jitnn's run on ``feed``, alternated in rounds (the
    engine that goes first alternates too) until ``budget_s`` is spent, at least 7 rounds."""
    import time
    times: dict[str, list[float]] = {"onnxruntime": [], "jitnn": []}
    runs = {"onnxruntime": lambda: session.run(None, feed), "jitnn": lambda: model.run(feed)}
    for run in runs.values():                           # warm both (jitnn binds its steps)
        run(), run()
    start = time.perf_counter()
    while len(times["jitnn"]) < 7 or time.perf_counter() - start < budget_s:
        order = list(runs) if len(times["jitnn"]) % 2 else list(runs)[::-1]
        for engine in order:
            begin = time.perf_counter()
            runs[engine]()
            times[engine].append(time.perf_counter() - begin)
        if len(times["jitnn"]) >= 200:
            break
    medians = {engine: float(np.median(t)) * 1e3 for engine, t in times.items()}
    return {"jitnn_ms": medians["jitnn"], "onnxruntime_ms": medians["onnxruntime"],
            "speed": medians["onnxruntime"] / medians["jitnn"]}


def check(name: str, folder: str, dynamo: bool = False, timed: bool = False) -> dict:
    """One model: ``{"name", "status", "error" or "why", "nodes", "launches"}``; ``timed``:
    also both engines' median run time on 1 thread and jitnn's speed over ONNX Runtime's."""
    import onnx
    import onnxruntime as ort

    import jitnn
    import jitnn.onnx
    row: dict = {"name": name, "library": MODELS[name][0]}
    try:
        path, feeds = export(name, folder, dynamo)
    except Exception as error:                          # noqa: BLE001 - reported, not raised
        root = error                 # the exporter's own errors wrap the cause in advice
        while root.__cause__ is not None:
            root = root.__cause__
        why = f"{type(error).__name__}: " + (f"{error}" if root is error else
                                             f"{type(root).__name__}: {root}")
        return {**row, "status": "export failed", "why": why}
    row["nodes"] = len(onnx.load(path, load_external_data=False).graph.node)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if timed:
            options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        model = jitnn.onnx.prepare(path, jitnn.Context(num_threads=1),
                                   input_shapes={k: v.shape for k, v in feeds[0].items()})
        worst = 0.0
        for feed in feeds:
            want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
            got = model.run(feed)
            for key, expected in want.items():
                if got[key].shape != expected.shape:
                    raise AssertionError(f"{key}: shape {got[key].shape}, ONNX Runtime's "
                                         f"{expected.shape}")
                # NaN and inf where ONNX Runtime has them (max() would take a NaN difference
                # for none), the difference over the finite rest
                finite = np.isfinite(expected)
                wrong = int(np.sum(np.isfinite(got[key]) != finite))
                if wrong:
                    raise AssertionError(f"{key}: {wrong} value(s) NaN or inf where ONNX "
                                         f"Runtime's are not, or the reverse")
                scale = float(np.abs(expected[finite]).max(initial=0.0)) or 1.0
                difference = np.abs(got[key] - expected)[finite]
                worst = max(worst, float(difference.max(initial=0.0)) / scale)
        plan = jitnn.explain(next(iter(model.dispatch(feeds[0]).values())))
        row["launches"] = plan.splitlines()[1].split("-> ")[1].split(" kernel")[0]
        if timed and worst < TOLERANCE:
            row.update(time_both(session, model, feeds[-1]))
    except Exception as error:                          # noqa: BLE001
        return {**row, "status": "failed", "why": f"{type(error).__name__}: {error}",
                "trace": traceback.format_exc(limit=-3)}
    return {**row, "status": "pass" if worst < TOLERANCE else "mismatch", "error": worst}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models (default: all; --list shows them)")
    parser.add_argument("--out", default=None, help="where the .onnx files go")
    parser.add_argument("--list", action="store_true", help="list the models and stop")
    parser.add_argument("--beyond", action="store_true",
                        help="only the detection, segmentation, generative, video and "
                             "encoder-decoder group (BEYOND)")
    parser.add_argument("--in-process", action="store_true",
                        help="run every model in this process (default: one process each)")
    parser.add_argument("--json", action="store_true", help="one JSON line per model")
    parser.add_argument("--dynamo", action="store_true",
                        help="export by torch.export (opset 18) instead of TorchScript")
    parser.add_argument("--time", action="store_true",
                        help="also time each matching model against ONNX Runtime (1 thread, "
                             "alternated, medians; the last input set)")
    args = parser.parse_args(argv)
    if args.list:
        for name, (library, _) in MODELS.items():
            print(f"{name:20s} {library}")
        return 0
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (see --list)")
    if args.beyond and not args.names:
        args.names = list(BEYOND)
    folder = args.out or out_dir()
    os.makedirs(folder, exist_ok=True)
    passed = 0
    for name in args.names or MODELS:
        if args.in_process or len(args.names) == 1:
            row = check(name, folder, args.dynamo, args.time)
        else:
            done = subprocess.run([sys.executable, __file__, name, "--out", folder, "--json"]
                                  + ["--dynamo"] * args.dynamo + ["--time"] * args.time,
                                  capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            row = json.loads(lines[-1]) if lines else {
                "name": name, "library": MODELS[name][0], "status": "crashed",
                "why": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        passed += row["status"] == "pass"
        if args.json:
            print(json.dumps(row), flush=True)
        elif row["status"] == "pass":
            speed = (f"  {row['jitnn_ms']:8.2f} ms, ORT {row['onnxruntime_ms']:8.2f} ms: "
                     f"{row['speed']:.2f}x" if "speed" in row else "")
            print(f"{name:20s} pass   {row['error']:.1e}  {row['nodes']:5d} nodes -> "
                  f"{row['launches']} launches{speed}", flush=True)
        elif row["status"] == "mismatch":
            print(f"{name:20s} mismatch {row['error']:.1e}  {row['nodes']:5d} nodes", flush=True)
        else:
            print(f"{name:20s} {row['status']}: {row['why'][:300]}", flush=True)
    if not args.json:
        print(f"{passed} of {len(args.names or MODELS)} pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
