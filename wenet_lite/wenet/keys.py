"""WeNet's state-dict keys and layouts mapped onto this toolkit's modules.

WeNet (``wenet/models/transformer/``) stores ``nn.Linear`` weights as (out, in) where
:class:`~wenet_lite.model.linear.Linear` keeps (in, out), and names its layers its own way.
Each function here takes WeNet's tensors under one prefix and returns ours, consuming every key
it understands; what it does not know stays for the caller to report.

So far: the conformer encoder and the CTC head (:func:`map_encoder`) and the attention
decoders (:func:`map_decoder`: ``decoder.left_decoder`` / ``decoder.right_decoder`` of a
``bitransformer``).
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import torch

__all__ = ["map_decoder", "map_encoder"]

_ATTENTION = {"linear_q": "q", "linear_k": "k", "linear_v": "v", "linear_out": "out"}
_BLOCK = {  # WeNet's decoder layer -> ours
    "norm1": "norm_self", "norm2": "norm_src", "norm3": "norm_ffn",
    "feed_forward.w_1": "ffn.0", "feed_forward.w_2": "ffn.3",
}  # fmt: skip


def map_decoder(
    state: Dict[str, torch.Tensor], source: str, target: str
) -> Dict[str, torch.Tensor]:
    """One WeNet transformer decoder under ``source`` (e.g. ``decoder.left_decoder``) as our
    TransformerDecoder under ``target`` (e.g. ``decoder.l2r``). The keys it reads are removed
    from ``state``."""
    out: Dict[str, torch.Tensor] = {}
    for key in [k for k in state if k.startswith(source + ".")]:
        name = key[len(source) + 1 :]
        ours = _decoder_name(name)
        if ours is None:
            continue
        value = state.pop(key)
        if ours.endswith(".weight") and value.dim() == 2 and not ours.startswith("embed."):
            value = value.t().contiguous()  # Linear: (out, in) -> (in, out)
        out[f"{target}.{ours}"] = value
    return out


def _decoder_name(name: str) -> Optional[str]:
    """Our name for a key of WeNet's TransformerDecoder, or None for one we do not take."""
    if name == "embed.0.weight":
        return "embed.weight"
    if name.startswith("after_norm."):
        return "norm." + name.split(".", 1)[1]
    if name.startswith("output_layer."):
        return "out." + name.split(".", 1)[1]
    if not name.startswith("decoders."):
        return None
    _, index, rest = name.split(".", 2)
    for theirs, ours in _BLOCK.items():
        if rest.startswith(theirs + "."):
            return f"blocks.{index}.{ours}{rest[len(theirs) :]}"
    attention, _, leaf = rest.partition(".")  # self_attn / src_attn
    layer, _, param = leaf.partition(".")
    if attention in ("self_attn", "src_attn") and layer in _ATTENTION:
        return f"blocks.{index}.{attention}.{_ATTENTION[layer]}.{param}"
    return None


_ENCODER_BLOCK = {  # WeNet's conformer layer -> ours (Linear and Conv1d k=1 are transposed)
    "self_attn.linear_out": "attn.out", "self_attn.linear_pos": "rel_pos.proj",
    "self_attn.pos_bias_u": "attn.pos_bias_u", "self_attn.pos_bias_v": "attn.pos_bias_v",
    "feed_forward_macaron.w_1": "ff1.0", "feed_forward_macaron.w_2": "ff1.3",
    "feed_forward.w_1": "ff2.0", "feed_forward.w_2": "ff2.3",
    "conv_module.pointwise_conv1": "conv.pointwise_in",
    "conv_module.pointwise_conv2": "conv.pointwise_out",
    "conv_module.depthwise_conv": "conv.depthwise", "conv_module.norm": "conv.norm",
    "norm_ff_macaron": "norm_ff1", "norm_mha": "norm_attn", "norm_conv": "norm_conv",
    "norm_ff": "norm_ff2", "norm_final": "norm_out",
}  # fmt: skip
_TRANSPOSED = ("attn.out", "rel_pos.proj", "ff1.", "ff2.", "conv.pointwise_in",
               "conv.pointwise_out")  # fmt: skip


def map_encoder(state: Dict[str, torch.Tensor], d_model: int) -> Dict[str, torch.Tensor]:
    """WeNet's ``encoder.*`` and ``ctc.ctc_lo`` as our ``encoder.*`` and ``ctc.proj``. WeNet
    scales the subsampling's output by sqrt(D) before the blocks; the scale is folded into our
    projection. The keys it reads are removed from ``state``."""
    out: Dict[str, torch.Tensor] = {}
    take = state.pop
    out["encoder.cmvn.mean"] = take("encoder.global_cmvn.mean")
    out["encoder.cmvn.istd"] = take("encoder.global_cmvn.istd")
    for i in (0, 2, 4):  # conv2d (rate 4), conv2d6 and conv2d8 share the layout
        for param in ("weight", "bias"):
            key = f"encoder.embed.conv.{i}.{param}"
            if key in state:
                out[f"encoder.subsampling.conv.{i}.{param}"] = take(key)
    projection = "encoder.embed.out.0" if "encoder.embed.out.0.weight" in state else (
        "encoder.embed.linear")  # fmt: skip
    scale = math.sqrt(d_model)
    out["encoder.subsampling.out.weight"] = take(f"{projection}.weight").t() * scale
    out["encoder.subsampling.out.bias"] = take(f"{projection}.bias") * scale
    for param in ("weight", "bias"):
        if f"encoder.after_norm.{param}" in state:
            out[f"encoder.final_norm.{param}"] = take(f"encoder.after_norm.{param}")
        out[f"ctc.proj.{param}"] = take(f"ctc.ctc_lo.{param}")
    out["ctc.proj.weight"] = out["ctc.proj.weight"].t().contiguous()
    blocks = sorted({int(k.split(".")[2]) for k in state if k.startswith("encoder.encoders.")})
    for n in blocks:
        out.update(_encoder_block(state, f"encoder.encoders.{n}", f"encoder.blocks.{n}"))
    return out


def _encoder_block(
    state: Dict[str, torch.Tensor], source: str, target: str
) -> Dict[str, torch.Tensor]:
    out: Dict[str, torch.Tensor] = {}
    q, k, v = (state.pop(f"{source}.self_attn.linear_{x}.weight") for x in "qkv")
    out[f"{target}.attn.qkv.weight"] = torch.cat([q.t(), k.t(), v.t()], dim=1)
    out[f"{target}.attn.qkv.bias"] = torch.cat(
        [state.pop(f"{source}.self_attn.linear_{x}.bias") for x in "qkv"]
    )
    for key in [k for k in state if k.startswith(source + ".")]:
        rest = key[len(source) + 1 :]
        for theirs, ours in _ENCODER_BLOCK.items():
            if rest == theirs or rest.startswith(theirs + "."):
                name = ours + rest[len(theirs) :]
                value = state.pop(key)
                if name.endswith(".weight") and name.startswith(_TRANSPOSED):
                    value = value.reshape(value.size(0), -1).t().contiguous()  # (in, out)
                out[f"{target}.{name}"] = value
                break
    return out
