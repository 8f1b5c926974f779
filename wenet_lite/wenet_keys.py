"""WeNet's state-dict keys and layouts mapped onto this toolkit's modules.

WeNet (``wenet/models/transformer/``) stores ``nn.Linear`` weights as (out, in) where
:class:`~wenet_lite.model.linear.Linear` keeps (in, out), and names its layers its own way.
Each function here takes WeNet's tensors under one prefix and returns ours, consuming every key
it understands; what it does not know stays for the caller to report.

So far: the attention decoders (``decoder.left_decoder`` / ``decoder.right_decoder`` of a
``bitransformer``, or ``decoder.*`` of a plain ``transformer``).
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

__all__ = ["map_decoder"]

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
