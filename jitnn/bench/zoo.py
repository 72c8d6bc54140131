"""The model zoo: real model definitions (transformers, timm, torchvision)
with seeded random weights, exported to ONNX for the tests and benchmarks.

    from jitnn.bench import zoo
    path = zoo.export("bert")                 # full size, cached .onnx
    path = zoo.export("bert", small=True)     # the reduced variant of tests/data/models
    feeds = zoo.inputs("bert", small=True)    # [{name: array}, ...] (two token inputs)

:data:`MODELS` is the registry ``{name: builder}``: ``builder(small)`` returns
a :class:`Built` (the PyTorch module in eval mode, its example inputs and the
ONNX names). No weights are downloaded: every model is built from its
definition, with weights drawn from a seeded generator (:func:`randomize`:
He-normal convs, layer scales and norms away from their identity initial
values; :func:`calibrate_batch_norms`: batch-norm statistics those of random
images), so a variant's weights are the same in every process and the
outputs depend on every layer. Each is exported with
the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``, opset
17) with dynamic batch (and sequence) axes, as a deployed model is, so the
shape arithmetic that the exporter emits around them is part of the graph.

Full-size files go to ``cache_dir()`` (``$JITNN_NETWORKS_DIR/zoo`` or
``~/.cache/jitnn/networks/zoo``; never the repository); the small variants
(reduced width, depth and resolution; a few hundred KB each) are written to
``tests/data/models/`` by ``benchmarks/make_test_models.py``.

torchvision: the release that matches torch 2.13 on the package index is a
CUDA build whose C extension does not load with the CPU torch, so
``import torchvision`` (and ``timm`` and ``transformers``, which import it)
fails. :func:`import_torchvision` works around it in one place: it defines
the schemas of the two ops torchvision registers (``nms``, ``qnms``) with a
plain CPU ``nms`` before the import; the model definitions are pure Python.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .networks import cache_dir as _networks_cache_dir

#: the sizes of the text inputs: (batch, sequence) of the small and the full variants
TEXT_SHAPES = {True: (2, 16), False: (1, 128)}


@dataclass
class Built:
    """A model ready to export: ``module`` (eval mode), ``example`` (one
    ``{input name: numpy array}``), the output names and the dynamic axes."""
    module: Any
    example: dict[str, np.ndarray]
    outputs: list[str]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    vocab: int = 0                   # text models: the token ids' range


def cache_dir() -> str:
    root = os.path.join(_networks_cache_dir(), "zoo")
    os.makedirs(root, exist_ok=True)
    return root


# --- the libraries ------------------------------------------------------------------

_TORCHVISION_LIBRARY = []       # keeps the op library alive (it unregisters when freed)


def import_torchvision():
    """``import torchvision`` with the CPU torch (see the module docstring);
    call it before importing timm or transformers too."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    import torch
    try:
        torch.ops.torchvision.nms.default            # a torchvision whose extension loaded
    except (AttributeError, RuntimeError):
        library = torch.library.Library("torchvision", "DEF")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.impl("nms", _nms, "CPU")
        _TORCHVISION_LIBRARY.append(library)
    import torchvision
    return torchvision


def _nms(dets, scores, iou_threshold: float):
    """Greedy non-maximum suppression (torchvision's nms, for its schema)."""
    import torch
    order = torch.argsort(scores, descending=True)
    boxes = dets[order]
    area = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    alive = torch.ones(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if not alive[i]:
            continue
        keep.append(int(order[i]))
        lo = torch.maximum(boxes[i, :2], boxes[i + 1:, :2])
        hi = torch.minimum(boxes[i, 2:], boxes[i + 1:, 2:])
        inter = (hi - lo).clamp(min=0).prod(dim=1)
        iou = inter / (area[i] + area[i + 1:] - inter)
        alive[i + 1:] &= iou <= iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _timm():
    import_torchvision()
    import timm
    return timm


def _transformers():
    import_torchvision()
    import transformers
    return transformers


# --- weights -------------------------------------------------------------------------

def randomize(model, seed: int = 1):
    """Seeded random weights for every parameter and batch-norm statistic:
    convs He-normal, linear layers and Conv1D N(0, 1 / fan_in) with biases
    N(0, 0.1), embeddings N(0, 1), norms' scales U(0.5, 1.5) and shifts
    N(0, 0.1) (batch norms also mean N(0, 0.1), variance U(0.5, 1.5), which
    the image models replace by :func:`calibrate_batch_norms`); any
    other parameter (layer scales, class tokens, position embeddings,
    relative position biases) N(0, 0.2) if it is a matrix, else U(0.5, 1)."""
    import torch
    from torch import nn
    generator = torch.Generator().manual_seed(seed)
    done: set[int] = set()

    def normal(tensor, std, mean=0.0):
        tensor.normal_(mean, std, generator=generator)
        done.add(id(tensor))

    def uniform(tensor, lo, hi):
        tensor.uniform_(lo, hi, generator=generator)
        done.add(id(tensor))

    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            bias = getattr(module, "bias", None)
            if isinstance(module, (nn.Conv1d, nn.Conv2d)):
                fan_in = weight[0].numel()
                normal(weight, (2.0 / fan_in) ** 0.5)
            elif isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
                fan_in = weight.shape[1] if isinstance(module, nn.Linear) else weight.shape[0]
                normal(weight, (1.0 / fan_in) ** 0.5)
            elif isinstance(module, nn.Embedding):
                normal(weight, 1.0)
            elif isinstance(module, nn.modules.batchnorm._BatchNorm):
                uniform(weight, 0.5, 1.5)
                normal(module.running_mean, 0.1)
                uniform(module.running_var, 0.5, 1.5)
            elif isinstance(module, (nn.LayerNorm, nn.GroupNorm)) or \
                    "RMSNorm" in type(module).__name__:
                if weight is not None:
                    uniform(weight, 0.5, 1.5)
            else:
                continue
            if isinstance(bias, torch.Tensor):
                normal(bias, 0.1)
        for parameter in model.parameters():
            if id(parameter) not in done:
                if parameter.dim() >= 2:
                    normal(parameter, 0.2)
                else:
                    uniform(parameter, 0.5, 1.0)
    return model.eval()


def _seeded(make: Callable):
    """``make()`` under a fixed torch seed, then :func:`randomize`."""
    import torch
    torch.manual_seed(0)
    return randomize(make())


def calibrate_batch_norms(model, x) -> None:
    """Set every batch norm's statistics to those of its input when the model
    runs on ``x`` (as a trained network's are its data's): with drawn
    statistics the activations of a deep residual network grow block after
    block (to 10^4 in RegNetY-1.6GF), and rounding then dominates the
    comparison."""
    import torch
    from torch import nn
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None                      # a cumulative average: the batch's statistics
        m.train()
    with torch.no_grad():
        model(torch.from_numpy(x))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
        m.eval()


# --- the models ----------------------------------------------------------------------

def _image(module, size: int, batch: int = 1, output: str = "logits") -> Built:
    x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    calibrate_batch_norms(module, np.random.default_rng(2).standard_normal(
        (4, 3, size, size)).astype(np.float32))
    return Built(module, {"input": x}, [output],
                 {"input": {0: "batch"}, output: {0: "batch"}})


def _hidden_states(model):
    """A transformers model as ``(input_ids, attention_mask) -> last_hidden_state``
    (no cache, no pooler: the output every model of the family has)."""
    from torch import nn

    class HiddenStates(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              return_dict=True).last_hidden_state

    return HiddenStates(model).eval()


def token_inputs(vocab: int, batch: int, sequence: int, seed: int) -> dict[str, np.ndarray]:
    """Random token ids and an attention mask whose rows end in padding of
    different lengths (row i keeps ``sequence - (seed + 2 * i) % (sequence // 2)``
    tokens, at least half of them), int64 as tokenizers give them."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, sequence), dtype=np.int64)
    mask = np.ones((batch, sequence), np.int64)
    for row in range(batch):
        pad = (seed + 2 * row) % max(1, sequence // 2)
        if pad:
            mask[row, sequence - pad:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _text(model, vocab: int, small: bool) -> Built:
    batch, sequence = TEXT_SHAPES[small]
    axes = {0: "batch", 1: "sequence"}
    return Built(_hidden_states(model), token_inputs(vocab, batch, sequence, seed=3),
                 ["last_hidden_state"],
                 {"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
                 vocab=vocab)


def bert(small: bool) -> Built:
    """transformers' BertModel: BERT-base (768 wide, 12 layers, 12 heads), or
    64 wide, 2 layers, 2 heads."""
    t = _transformers()
    config = t.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=128, vocab_size=128, max_position_embeddings=64) \
        if small else t.BertConfig()
    return _text(_seeded(lambda: t.BertModel(config, add_pooling_layer=False)),
                 config.vocab_size, small)


def gpt2(small: bool) -> Built:
    """transformers' GPT2Model (causal mask, tanh GELU, Conv1D layers): GPT-2
    small (124M), or 64 wide (MLP 128), 2 layers, 2 heads."""
    t = _transformers()
    config = t.GPT2Config(n_embd=64, n_layer=2, n_head=2, n_inner=128, vocab_size=128,
                          n_positions=64, bos_token_id=0, eos_token_id=0) \
        if small else t.GPT2Config()
    config.use_cache = False
    return _text(_seeded(lambda: t.GPT2Model(config)), config.vocab_size, small)


def llama(small: bool) -> Built:
    """transformers' LlamaModel: RMSNorm, rotary position embeddings, causal
    mask, grouped-query attention, SwiGLU MLP. A TinyLlama-like 512-wide,
    8-layer model (8 heads, 4 key-value heads), or 64 wide, 2 layers, 4
    heads, 2 key-value heads."""
    t = _transformers()
    if small:
        config = t.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                               max_position_embeddings=64)
    else:
        config = t.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                               num_attention_heads=8, num_key_value_heads=4, vocab_size=32000,
                               max_position_embeddings=2048)
    config.use_cache = False
    return _text(_seeded(lambda: t.LlamaModel(config)), config.vocab_size, small)


def vit(small: bool) -> Built:
    """transformers' ViTModel: ViT-B/16 at 224, or a 32-pixel image in 8x8
    patches, 64 wide, 2 layers, 2 heads."""
    t = _transformers()
    config = t.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128, image_size=32, patch_size=8) \
        if small else t.ViTConfig()
    from torch import nn

    class Pixels(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values):
            return self.inner(pixel_values=pixel_values, return_dict=True).last_hidden_state

    module = Pixels(_seeded(lambda: t.ViTModel(config, add_pooling_layer=False))).eval()
    built = _image(module, config.image_size, batch=2 if small else 1,
                   output="last_hidden_state")
    built.example = {"pixel_values": built.example.pop("input")}
    built.dynamic_axes = {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    return built


def convnext(small: bool) -> Built:
    """timm's ConvNeXt-T, or depths (1, 1, 2, 1), widths (12, 24, 40, 64) at 64 px."""
    timm = _timm()
    from timm.models.convnext import ConvNeXt
    if small:
        module = _seeded(lambda: ConvNeXt(depths=(1, 1, 2, 1), dims=(12, 24, 40, 64),
                                          num_classes=100))
        return _image(module, 64)
    return _image(_seeded(lambda: timm.create_model("convnext_tiny")), 224)


def efficientnet_b0(small: bool) -> Built:
    """torchvision's EfficientNet-B0, or width 0.2, depth 0.34, 10 classes at 64 px."""
    tv = import_torchvision()
    from torchvision.models import efficientnet
    if small:
        def make():
            setting, last = efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.2,
                                                            depth_mult=0.34)
            return efficientnet.EfficientNet(setting, 0.2, last_channel=last, num_classes=10)
        return _image(_seeded(make), 64)
    return _image(_seeded(lambda: tv.models.efficientnet_b0(weights=None)), 224)


def mobilenetv3_large(small: bool) -> Built:
    """torchvision's MobileNetV3-Large (hard-swish, squeeze-and-excitation
    with hard-sigmoid), or width 0.2 with the reduced tail, 10 classes at 64 px."""
    tv = import_torchvision()
    if small:
        return _image(_seeded(lambda: tv.models.mobilenet_v3_large(
            weights=None, width_mult=0.2, reduced_tail=True, num_classes=10)), 64)
    return _image(_seeded(lambda: tv.models.mobilenet_v3_large(weights=None)), 224)


def regnety(small: bool) -> Built:
    """timm's RegNetY-1.6GF (grouped convs, squeeze-and-excitation), or a
    5-block RegNetY of widths 16-56 (2 to 7 groups of 8) at 64 px."""
    timm = _timm()
    from timm.models.regnet import RegNet, RegNetCfg
    if small:
        cfg = RegNetCfg(depth=5, w0=16, wa=12.0, wm=1.5, group_size=8, se_ratio=0.25,
                        stem_width=8)
        return _image(_seeded(lambda: RegNet(cfg, num_classes=100)), 64)
    return _image(_seeded(lambda: timm.create_model("regnety_016")), 224)


def densenet121(small: bool) -> Built:
    """torchvision's DenseNet-121 (concatenated dense blocks), or growth 8,
    blocks (2, 2, 2, 2), 16 initial features at 64 px."""
    tv = import_torchvision()
    if small:
        from torchvision.models.densenet import DenseNet
        return _image(_seeded(lambda: DenseNet(growth_rate=8, block_config=(2, 2, 2, 2),
                                               num_init_features=16, num_classes=100)), 64)
    return _image(_seeded(lambda: tv.models.densenet121(weights=None)), 224)


def shufflenetv2(small: bool) -> Built:
    """torchvision's ShuffleNetV2 x1.0 (channel split, shuffle as
    Reshape-Transpose-Reshape), or stages (2, 2, 2) of widths 16-128 at 64 px."""
    tv = import_torchvision()
    if small:
        from torchvision.models.shufflenetv2 import ShuffleNetV2
        return _image(_seeded(lambda: ShuffleNetV2([2, 2, 2], [8, 16, 32, 64, 128],
                                                   num_classes=100)), 64)
    return _image(_seeded(lambda: tv.models.shufflenet_v2_x1_0(weights=None)), 224)


def swin(small: bool) -> Built:
    """timm's Swin-T (shifted windows: roll, window partition, relative
    position bias, the shift mask), or a 64-px, 4x4-window, 8-wide Swin of
    depths (2, 2, 1, 1) (the second block of a stage shifts its windows; a
    stage whose map is no larger than a window does not)."""
    timm = _timm()
    from timm.models.swin_transformer import SwinTransformer
    if small:
        return _image(_seeded(lambda: SwinTransformer(
            img_size=64, patch_size=4, window_size=4, embed_dim=8, depths=(2, 2, 1, 1),
            num_heads=(1, 1, 2, 2), num_classes=100)), 64)
    return _image(_seeded(lambda: timm.create_model("swin_tiny_patch4_window7_224")), 224)


def deeplabv3(small: bool) -> Built:
    """torchvision's DeepLabV3 with a dilated MobileNetV3-Large backbone (ASPP,
    its image-pooling branch, the bilinear Resize back to the input size), 21
    classes at 256 px, or width 0.2 with the reduced tail, a 16-channel ASPP
    head, 4 classes at 64 px."""
    tv = import_torchvision()
    from torch import nn
    from torchvision.models.segmentation import deeplabv3 as dl

    class Out(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input):
            return self.inner(input)["out"]

    if small:
        def make():
            backbone = tv.models.mobilenet_v3_large(weights=None, width_mult=0.2,
                                                    reduced_tail=True, dilated=True)
            model = dl._deeplabv3_mobilenetv3(backbone, num_classes=4, aux=False)
            channels = model.classifier[0].convs[0][0].in_channels
            model.classifier = nn.Sequential(
                dl.ASPP(channels, [12, 24, 36], out_channels=16),
                nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                nn.Conv2d(16, 4, 1))
            return model
        return _image(Out(_seeded(make)).eval(), 64, output="out")
    return _image(Out(_seeded(lambda: tv.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None))).eval(), 256, output="out")


#: the registry: name -> builder(small) (in the order the docs list them)
MODELS: dict[str, Callable[[bool], Built]] = {
    "bert": bert, "gpt2": gpt2, "llama": llama, "vit": vit, "convnext": convnext,
    "efficientnet_b0": efficientnet_b0, "mobilenetv3_large": mobilenetv3_large,
    "regnety": regnety, "densenet121": densenet121, "shufflenetv2": shufflenetv2,
    "swin": swin, "deeplabv3": deeplabv3,
}

#: the models whose inputs are token ids (``input_ids``, ``attention_mask``)
TEXT = ("bert", "gpt2", "llama")


def _torchvision(name: str, **options) -> Callable[[], Built]:
    def make() -> Built:
        tv = import_torchvision()
        return _image(_seeded(lambda: getattr(tv.models, name)(weights=None, **options)), 224)
    make.__doc__ = f"torchvision's {name} at 224 px"
    return make


def _timm_model(name: str) -> Callable[[], Built]:
    def make() -> Built:
        return _image(_seeded(lambda: _timm().create_model(name)), 224)
    make.__doc__ = f"timm's {name} at 224 px"
    return make


#: full-size models only the benchmarks run (``jitnn bench zoo``), with the
#: families :data:`MODELS` leaves out: name -> builder()
BENCH_MODELS: dict[str, Callable[[], Built]] = {
    "resnet50": _torchvision("resnet50"),
    "resnet50d": _timm_model("resnet50d"),
    "resnext50": _torchvision("resnext50_32x4d"),
    "regnetx_400mf": _torchvision("regnet_x_400mf"),
    "mobilenetv2": _torchvision("mobilenet_v2"),
    "mobilenetv3_small": _torchvision("mobilenet_v3_small"),
    "efficientnet_b1": _torchvision("efficientnet_b1"),
    "squeezenet": _torchvision("squeezenet1_1"),
    "googlenet": _torchvision("googlenet", aux_logits=False, init_weights=False),
    "vgg11": _torchvision("vgg11"),
    "mnasnet": _torchvision("mnasnet1_0"),
}


#: ``LIBRARY:NAME`` names any classifier of these libraries at 224 px (``timm:hgnetv2_b0``,
#: ``torchvision:mnasnet0_5``): benchmarks of the models the zoo does not list
BY_LIBRARY = {"timm": _timm_model, "torchvision": _torchvision}


#: ``jitnn bench zoo --models beyond``: 25 timm and torchvision families the zoo
#: lacks (RESULTS.md, "Models beyond the zoo")
BEYOND = ("timm:hgnetv2_b0", "timm:mobileone_s0", "timm:ghostnet_100", "timm:repvgg_a0",
          "timm:fastvit_t8", "timm:levit_128s", "timm:mobilevit_s", "timm:efficientvit_b0",
          "timm:deit_small_patch16_224", "timm:poolformer_s12", "timm:pvt_v2_b0",
          "timm:edgenext_x_small", "timm:dla34", "timm:cspdarknet53", "timm:res2net50_26w_4s",
          "timm:dpn68", "timm:rexnet_100", "timm:lcnet_050", "timm:mobilenetv4_conv_small",
          "timm:inception_v3", "torchvision:resnet18", "torchvision:wide_resnet50_2",
          "torchvision:densenet169", "timm:convnextv2_atto", "timm:regnetz_b16")


def bench_model(name: str) -> Callable[[], Built] | None:
    """The full-size builder of ``name``: one of :data:`BENCH_MODELS`, or a
    ``LIBRARY:NAME`` of :data:`BY_LIBRARY`; None if it is neither."""
    if name in BENCH_MODELS:
        return BENCH_MODELS[name]
    library, _, model = name.partition(":")
    if library in BY_LIBRARY and model:
        return BY_LIBRARY[library](model)
    return None


def _builder(name: str, small: bool) -> Callable[[bool], Built]:
    if name in MODELS:
        return MODELS[name]
    make = bench_model(name)
    if make is not None and not small:
        return lambda _small: make()
    known = ", ".join(list(MODELS) + list(BENCH_MODELS))
    raise ValueError(f"unknown model {name!r}{' (small)' if small else ''}, expected one of "
                     f"{known} (the benchmark-only ones at full size), or "
                     f"{' or '.join(BY_LIBRARY)}:NAME")


def build(name: str, small: bool = False) -> Built:
    return _builder(name, small)(small)


def inputs(name: str, small: bool = False, built: Built | None = None) -> list[dict]:
    """The inputs the tests run a model on: for the text models two token
    inputs (other ids and padding), for the others the example image."""
    built = built or build(name, small)
    if name not in TEXT:
        return [built.example]
    batch, sequence = TEXT_SHAPES[small]
    return [built.example, token_inputs(built.vocab, batch, sequence, seed=8)]


def fingerprint(name: str) -> str:
    """A short hash of what model ``name``'s file depends on: its builder's
    and the weight functions' source, and the versions of torch and the
    library that defines it; a cached file of another fingerprint is stale."""
    import hashlib
    import importlib.metadata
    import inspect
    source = MODELS[name] if name in MODELS else bench_model(name)
    if source is None:
        raise ValueError(f"unknown model {name!r}")
    parts = [inspect.getsource(f) for f in (source, randomize, calibrate_batch_norms,
                                            token_inputs, _image, _text)]
    if name not in MODELS:
        parts.append(f"{name}: {source.__doc__}")
    for package in ("torch", "transformers", "timm", "torchvision"):
        try:
            parts.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{package} -")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:8]


def export(name: str, small: bool = False, *, path: str | None = None, force: bool = False,
           opset: int = 17, dynamo: bool = False) -> str:
    """Export model ``name`` to ``path`` (default ``cache_dir()/<name>[-small]
    [-dynamo]-<fingerprint>-opset<opset>.onnx``), once unless ``force``; returns the path.
    ``dynamo``: torch's ``torch.export``-based exporter (opset 18 and newer;
    the same axes dynamic, the weights inside the file) instead of the
    TorchScript one."""
    if dynamo:
        opset = max(opset, 18)
    if path is None:
        variant = (f"{name.replace(':', '-')}{'-small' if small else ''}"
                   f"{'-dynamo' if dynamo else ''}")
        path = os.path.join(cache_dir(), f"{variant}-{fingerprint(name)}-opset{opset}.onnx")
    if os.path.exists(path) and not force:
        return path
    import contextlib
    import io

    import torch
    built = build(name, small)
    tmp = path + f".tmp{os.getpid()}"
    names = list(built.example)
    args = tuple(torch.from_numpy(built.example[n]) for n in names)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if dynamo:
            dynamic = tuple({axis: torch.export.Dim.DYNAMIC for axis in built.dynamic_axes[n]}
                            for n in names)
            torch.onnx.export(built.module, args, tmp, dynamo=True, opset_version=opset,
                              input_names=names, output_names=built.outputs,
                              dynamic_shapes=dynamic, external_data=False)
        else:
            torch.onnx.export(built.module, args, tmp, dynamo=False, opset_version=opset,
                              input_names=names, output_names=built.outputs,
                              dynamic_axes=built.dynamic_axes)
    os.replace(tmp, path)
    return path


def run_torch(built: Built, feed: dict[str, np.ndarray]) -> np.ndarray:
    """The PyTorch module's output on ``feed`` (the model the export traced)."""
    import torch
    with torch.inference_mode():
        out = built.module(*(torch.from_numpy(feed[n]) for n in built.example))
    return out.numpy()


__all__ = ["BENCH_MODELS", "BEYOND", "BY_LIBRARY", "MODELS", "TEXT", "Built", "bench_model", "build", "cache_dir", "calibrate_batch_norms", "export",
           "fingerprint", "import_torchvision", "inputs", "randomize", "run_torch",
           "token_inputs"]
