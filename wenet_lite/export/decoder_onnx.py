"""``decoder.onnx``: the attention decoder's scores for attention rescoring, written beside
``model.onnx`` by `wenet-lite export --format onnx` when the model has a decoder (sherpa-onnx
reads only model.onnx and ignores it).

Inputs: ``hyps`` (N, U) int64 token ids (no start/end marks; padding any id), ``hyps_lens``
(N,) int64, ``encoder_out`` (N, S, D) float32 (each hypothesis' segment encoder output: repeat
one segment's for its n-best), ``encoder_lens`` (N,) int64. Outputs: ``l2r_scores`` and
``r2l_scores`` (N,): log-probabilities of each hypothesis and its end, left to right and right
to left (the latter all zero without a right-to-left decoder). A runtime combines them as
``(1 - reverse_weight) * l2r + reverse_weight * r2l + ctc_weight * CTC score`` (defaults in
the metadata: ``rescore_ctc_weight``, ``rescore_reverse_weight``). N, U and S are dynamic.
Exported with torch.export (``torch.onnx.export(dynamo=True)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple, Union

import torch
from torch import nn

from wenet_lite.export.batched import OPSET, quiet_exporter
from wenet_lite.export.common import to_torch_linear
from wenet_lite.fileio import atomic_open
from wenet_lite.model.decoder import AttentionDecoder

__all__ = ["DecoderScores", "export_decoder_onnx"]

INPUTS = ("hyps", "hyps_lens", "encoder_out", "encoder_lens")
OUTPUTS = ("l2r_scores", "r2l_scores")


class DecoderScores(nn.Module):
    """Both directions' teacher-forced scores of N hypotheses."""

    def __init__(self, decoder: AttentionDecoder) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(
        self,
        hyps: torch.Tensor,
        hyps_lens: torch.Tensor,
        encoder_out: torch.Tensor,
        encoder_lens: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        l2r = self.decoder.score(encoder_out, encoder_lens, hyps, hyps_lens, 0.0)
        if not self.decoder.bidirectional:
            return l2r, torch.zeros_like(l2r)
        return l2r, self.decoder.score(encoder_out, encoder_lens, hyps, hyps_lens, 1.0)


def export_decoder_onnx(
    decoder: AttentionDecoder, d_model: int, out: Union[str, Path], meta: Dict[str, str]
) -> Path:
    """Write ``out`` (decoder.onnx) with ``meta`` as its metadata."""
    wrapper = to_torch_linear(DecoderScores(decoder)).eval()
    n, u, s = 3, 5, 11
    example = (
        torch.ones(n, u, dtype=torch.long),
        torch.full((n,), u, dtype=torch.long),
        torch.zeros(n, s, d_model),
        torch.full((n,), s, dtype=torch.long),
    )
    hyps, tokens = torch.export.Dim("hyps", min=1), torch.export.Dim("tokens", min=1)
    frames = torch.export.Dim("frames", min=1)
    dynamic = {
        "hyps": {0: hyps, 1: tokens},
        "hyps_lens": {0: hyps},
        "encoder_out": {0: hyps, 1: frames},
        "encoder_lens": {0: hyps},
    }
    with quiet_exporter():
        program = torch.onnx.export(
            wrapper, example, dynamo=True, input_names=list(INPUTS), output_names=list(OUTPUTS),
            dynamic_shapes=dynamic, opset_version=OPSET, optimize=True, verbose=False,
        )  # fmt: skip
    proto = program.model_proto
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    out = Path(out)
    with atomic_open(out, "wb") as f:
        f.write(proto.SerializeToString())
    return out
