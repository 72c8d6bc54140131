"""A wider check of the ONNX frontend than the zoo: a hundred more models.

    python benchmarks/onnx_sweep.py                    # every model
    python benchmarks/onnx_sweep.py falcon mpnet fcn   # some of them
    python benchmarks/onnx_sweep.py --list
    python benchmarks/onnx_sweep.py --dynamo           # torch.export-based exporter

Each model is built from its library's definition (transformers, timm,
torchvision) in a small configuration with seeded random weights
(``jitnn.bench.zoo.randomize``; batch-norm statistics calibrated on random
images), exported by ``torch.onnx.export`` (TorchScript, opset 17, dynamic
batch and sequence axes; ``--dynamo``: the ``torch.export``-based exporter,
torch's default, opset 18, the same axes dynamic, files of their own) to
``--out`` (default ``$JITNN_NETWORKS_DIR/sweep`` or
``~/.cache/jitnn/networks/sweep``, never the repository), then run by ONNX
Runtime and by ``jitnn.onnx`` (1 thread) on the same inputs: two token inputs
for the text models, one input otherwise. One row per model: ``pass`` with
the largest difference over the largest output magnitude (below 1e-3), or
what failed (the export, loading: jitnn's error, or the numbers; a NaN or
inf where ONNX Runtime's output has a number fails). Each model
runs in its own process (``--in-process``: not), so that one that crashes or
exhausts memory leaves the others. docs/onnx.md has the results. Needs torch
2.13 (CPU), transformers, timm, torchvision, onnx and onnxruntime.
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


def whisper_encoder() -> Built:
    t = zoo._transformers()
    cfg = t.WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=2,
                          decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=128,
                          decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=16,
                          vocab_size=128, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                          decoder_start_token_id=0, max_target_positions=16)
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


def check(name: str, folder: str, dynamo: bool = False) -> dict:
    """One model: ``{"name", "status", "error" or "why", "nodes", "launches"}``."""
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
    except Exception as error:                          # noqa: BLE001
        return {**row, "status": "failed", "why": f"{type(error).__name__}: {error}",
                "trace": traceback.format_exc(limit=-3)}
    return {**row, "status": "pass" if worst < TOLERANCE else "mismatch", "error": worst}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models (default: all; --list shows them)")
    parser.add_argument("--out", default=None, help="where the .onnx files go")
    parser.add_argument("--list", action="store_true", help="list the models and stop")
    parser.add_argument("--in-process", action="store_true",
                        help="run every model in this process (default: one process each)")
    parser.add_argument("--json", action="store_true", help="one JSON line per model")
    parser.add_argument("--dynamo", action="store_true",
                        help="export by torch.export (opset 18) instead of TorchScript")
    args = parser.parse_args(argv)
    if args.list:
        for name, (library, _) in MODELS.items():
            print(f"{name:20s} {library}")
        return 0
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (see --list)")
    folder = args.out or out_dir()
    os.makedirs(folder, exist_ok=True)
    passed = 0
    for name in args.names or MODELS:
        if args.in_process or len(args.names) == 1:
            row = check(name, folder, args.dynamo)
        else:
            done = subprocess.run([sys.executable, __file__, name, "--out", folder, "--json"]
                                  + ["--dynamo"] * args.dynamo,
                                  capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            row = json.loads(lines[-1]) if lines else {
                "name": name, "library": MODELS[name][0], "status": "crashed",
                "why": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        passed += row["status"] == "pass"
        if args.json:
            print(json.dumps(row), flush=True)
        elif row["status"] == "pass":
            print(f"{name:20s} pass   {row['error']:.1e}  {row['nodes']:5d} nodes -> "
                  f"{row['launches']} launches", flush=True)
        else:
            print(f"{name:20s} {row['status']}: {row['why'][:300]}", flush=True)
    if not args.json:
        print(f"{passed} of {len(args.names or MODELS)} pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
