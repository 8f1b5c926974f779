"""Write small WeNet-made models and WeNet's own outputs, the reference for importing WeNet.

Development only: it runs WeNet's model code from a checkout of WeNet's source (not a
dependency of wenet_lite; WeNet is not on PyPI), pinned at ``PINNED``:

    git clone https://github.com/wenet-e2e/wenet /tmp/wenet && git -C /tmp/wenet checkout <PINNED>
    python tests/data/wenet/make_golden.py --wenet /tmp/wenet --out tests/data/wenet

Each case directory holds what WeNet publishes for a model (``final.pt``, a bare state dict
without the position tables, as 2021 checkpoints have it; ``train.yaml``; ``global_cmvn``;
``units.txt``; ``bpe.model`` for BPE units) and ``golden.pt``: fixed random features and
WeNet's outputs for them (encoder full context for a padded batch of two, chunk-masked 16/-1
and 16/4, chunk-by-chunk streaming 16/-1 and 16/4, CTC log-probs, both attention decoders'
log-probs for fixed hypotheses) and its tokenizer's ids for sample text. Weights are random
(seeded): the cases test arithmetic, not accuracy. WeNet's model code imports with only torch,
pyyaml and numpy once five modules it does not use at inference are stood in for
(:func:`_stand_ins`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import types
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
import yaml

PINNED = "015469960db7"
"""WeNet's commit the golden files were written with"""
D, HEADS, UNITS, BLOCKS, FEAT = 32, 4, 64, 2, 80
SAMPLE_TEXT = ["HELLO WORLD", "THE QUICK BROWN FOX", "ZEBRA QUIZ", "你好 世界"]
_WORDS = ("THE QUICK BROWN FOX JUMPS OVER A LAZY DOG HELLO WORLD SPEECH RECOGNITION STREAMS "
          "AUDIO IN CHUNKS WITH CACHED LEFT CONTEXT AND RELATIVE POSITIONS").split()  # fmt: skip
_CHARS = "你好世界我们的语音识别模型在流式解码中工作"

CASES: Dict[str, Dict[str, Any]] = {
    # LibriSpeech U2++ as published in 2021: BPE units, <sos/eos> last, the old train.yaml
    # layout (top-level cmvn_file/is_json_cmvn, no special_tokens).
    "librispeech": dict(input_layer="conv2d", kernel=15, norm="layer_norm", causal=True,
                        heads=HEADS, units="bpe", layout="old", sos_last=True),
    # AISHELL U2++: kernel 8, character units, <sos/eos> 2 and special_tokens, Kaldi CMVN.
    "aishell": dict(input_layer="conv2d", kernel=8, norm="layer_norm", causal=True,
                    heads=HEADS, units="char", layout="new", sos_last=False),
    # GigaSpeech U2++: subsampling by 6, 8 heads, kernel 8.
    "gigaspeech": dict(input_layer="conv2d6", kernel=8, norm="layer_norm", causal=True,
                       heads=8, units="bpe", layout="new", sos_last=False),
    # A recipe's non-U2 conformer: batch-norm conv module, not causal (full context only).
    "batchnorm": dict(input_layer="conv2d", kernel=15, norm="batch_norm", causal=False,
                      heads=HEADS, units="bpe", layout="new", sos_last=False),
    # A checkpoint from before 2022: every encoder and decoder LayerNorm at eps 1e-12.
    "eps1e-12": dict(input_layer="conv2d", kernel=15, norm="layer_norm", causal=True,
                     heads=HEADS, units="bpe", layout="old", sos_last=True, eps=1e-12),
}  # fmt: skip


def _stand_ins(src: Path) -> None:
    """Import WeNet's models without its CLI, whisper, torchaudio or librosa."""
    from typing import Optional, Tuple, Union

    import torch.nn.modules.conv as conv

    package = types.ModuleType("wenet")  # not wenet/__init__.py, which imports the CLI
    package.__path__ = [str(src / "wenet")]
    conv.Union, conv.Optional, conv.Tensor = Union, Optional, torch.Tensor  # squeezeformer
    whisper, tokenizer = types.ModuleType("whisper"), types.ModuleType("whisper.tokenizer")
    tokenizer.LANGUAGES, whisper.tokenizer = {}, tokenizer
    audio = types.ModuleType("torchaudio")
    functional = types.ModuleType("torchaudio.functional")
    compliance = types.ModuleType("torchaudio.compliance")
    kaldi = types.ModuleType("torchaudio.compliance.kaldi")
    functional.forced_align = None  # ctc_utils; alignment only
    kaldi.Tuple = Tuple  # paraformer/cif.py imports it from there
    audio.functional, audio.compliance, compliance.kaldi = functional, compliance, kaldi
    sys.modules.update({
        "wenet": package, "whisper": whisper, "whisper.tokenizer": tokenizer,
        "torchaudio": audio, "torchaudio.functional": functional,
        "torchaudio.compliance": compliance, "torchaudio.compliance.kaldi": kaldi,
    })  # fmt: skip


def _sentences(rng: np.random.Generator, chars: bool) -> List[str]:
    if chars:
        return ["".join(rng.choice(list(_CHARS), int(rng.integers(3, 9)))) for _ in range(200)]
    return [" ".join(rng.choice(_WORDS, int(rng.integers(3, 8)))) for _ in range(300)]


def _units(out: Path, case: Dict[str, Any], rng: np.random.Generator) -> List[str]:
    """Write units.txt (and bpe.model) as WeNet's recipes make them; return the units."""
    if case["units"] == "bpe":
        import io

        import sentencepiece as spm

        text = _sentences(rng, chars=False)
        model = io.BytesIO()  # spm_train's defaults, as the recipes call it: unk 0, bos 1, eos 2
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text), model_writer=model, vocab_size=50,
            model_type="unigram", minloglevel=2,
        )  # fmt: skip
        (out / "bpe.model").write_bytes(model.getvalue())
        sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
        pieces = sorted({p for line in text for p in sp.encode_as_pieces(line)})
    else:
        pieces = sorted({ch for line in _sentences(rng, chars=True) for ch in line})
    head = ["<blank>", "<unk>"] + ([] if case["sos_last"] else ["<sos/eos>"])
    units = head + pieces + (["<sos/eos>"] if case["sos_last"] else [])
    (out / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)))
    return units


def _cmvn(out: Path, json_format: bool, rng: np.random.Generator) -> None:
    count = 1000
    mean = rng.normal(10, 2, FEAT)
    var = rng.uniform(0.5, 4, FEAT)
    mean_stat, var_stat = mean * count, (var + mean**2) * count
    if json_format:
        stats = {"mean_stat": mean_stat.tolist(), "var_stat": var_stat.tolist(),
                 "frame_num": count}  # fmt: skip
        (out / "global_cmvn").write_text(json.dumps(stats))
    else:  # Kaldi's `compute-cmvn-stats --binary=false` text matrix
        row1 = " ".join(f"{x:.6f}" for x in [*mean_stat, count])
        row2 = " ".join(f"{x:.6f}" for x in var_stat) + " 0"
        (out / "global_cmvn").write_text(f" [\n  {row1}\n  {row2} ]\n")


def _train_yaml(case: Dict[str, Any], units: List[str], out: Path) -> Dict[str, Any]:
    encoder = dict(
        output_size=D, attention_heads=case["heads"], linear_units=UNITS, num_blocks=BLOCKS,
        dropout_rate=0.1, positional_dropout_rate=0.1, attention_dropout_rate=0.0,
        input_layer=case["input_layer"], normalize_before=True, cnn_module_kernel=case["kernel"],
        use_cnn_module=True, activation_type="swish", pos_enc_layer_type="rel_pos",
        selfattention_layer_type="rel_selfattn", causal=case["causal"],
        use_dynamic_chunk=case["causal"], cnn_module_norm=case["norm"],
        use_dynamic_left_chunk=False,
    )  # fmt: skip
    decoder = dict(attention_heads=case["heads"], linear_units=UNITS, num_blocks=1,
                   r_num_blocks=1, dropout_rate=0.1, positional_dropout_rate=0.1,
                   self_attention_dropout_rate=0.0, src_attention_dropout_rate=0.0)  # fmt: skip
    configs: Dict[str, Any] = {
        "encoder": "conformer", "encoder_conf": encoder, "decoder": "bitransformer",
        "decoder_conf": decoder, "ctc": "ctc", "ctc_conf": {"ctc_blank_id": 0},
        "model": "asr_model",
        "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False,
                       "reverse_weight": 0.3},
        "input_dim": FEAT, "output_dim": len(units),
        "dataset_conf": {"fbank_conf": {"num_mel_bins": FEAT, "frame_shift": 10,
                                        "frame_length": 25, "dither": 1.0}},
    }  # fmt: skip
    cmvn_file = str(out / "global_cmvn")
    if case["layout"] == "old":
        configs.update(cmvn_file=cmvn_file, is_json_cmvn=True)
    else:
        sos = units.index("<sos/eos>")
        configs["cmvn"] = "global_cmvn"
        configs["cmvn_conf"] = {"cmvn_file": cmvn_file, "is_json_cmvn": case["units"] == "bpe"}
        configs["tokenizer"] = "bpe" if case["units"] == "bpe" else "char"
        configs["tokenizer_conf"] = {
            "symbol_table_path": "units.txt", "split_with_space": False,
            "bpe_path": "bpe.model" if case["units"] == "bpe" else None,
            "non_lang_syms_path": None,
            "special_tokens": {"<blank>": 0, "<unk>": 1, "<sos>": sos, "<eos>": sos},
        }  # fmt: skip
    return configs


def _build(configs: Dict[str, Any], case: Dict[str, Any]) -> torch.nn.Module:
    from wenet.utils.init_model import init_model

    built = copy.deepcopy(configs)
    if case["layout"] == "old":  # what WeNet of 2021 read from these keys
        built["cmvn"] = "global_cmvn"
        built["cmvn_conf"] = {"cmvn_file": built.pop("cmvn_file"),
                              "is_json_cmvn": built.pop("is_json_cmvn")}  # fmt: skip
    model, _ = init_model(argparse.Namespace(), built)
    for p in model.parameters():  # random but not tiny: every term of the score matters
        if p.dim() == 1:
            p.data.normal_(0, 0.2)
    if "eps" in case:
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.eps = case["eps"]
    return model.eval()


def _outputs(model: torch.nn.Module, units: List[str], out: Path, case: Dict[str, Any],
             gen: torch.Generator) -> Dict[str, Any]:  # fmt: skip
    feats = torch.randn(2, 400, FEAT, generator=gen) * 2 + 10
    lens = torch.tensor([400, 331])
    golden: Dict[str, Any] = {"feats": feats, "lens": lens}
    enc = model.encoder
    with torch.no_grad():
        full, mask = enc(feats, lens, -1, -1)  # -1: full context (0 draws a random chunk)
        golden["full"], golden["full_lens"] = full, mask.squeeze(1).sum(1)
        golden["ctc_full"] = model.ctc.log_softmax(full)
        if case["causal"]:
            for left in (-1, 4):
                golden[f"chunk16_{left}"] = enc(feats, lens, 16, left)[0]
                one = feats[:1]
                golden[f"stream16_{left}"] = enc.forward_chunk_by_chunk(one, 16, left)[0]
            golden["sherpa16_4"] = _sherpa_convention(enc, feats[:1], 16, 4)
        sos = units.index("<sos/eos>")
        hyps = [[3, 4, 5, 6, 7], [8, 9, 10], [5, 5, 11, 12]]
        golden["hyps"] = hyps
        pad = torch.full((len(hyps), 6), -1, dtype=torch.long)
        for i, h in enumerate(hyps):
            pad[i, : len(h)] = torch.tensor(h)
        hyps_lens = torch.tensor([len(h) for h in hyps])
        from wenet.utils.common import add_sos_eos, reverse_pad_list

        ys_in, _ = add_sos_eos(pad, sos, sos, -1)
        r_pad = reverse_pad_list(pad, hyps_lens, -1.0)
        r_ys_in, _ = add_sos_eos(r_pad, sos, sos, -1)
        memory = full[:1].repeat(len(hyps), 1, 1)
        memory_mask = mask[:1].repeat(len(hyps), 1, 1)
        l2r, r2l, _ = model.decoder(memory, memory_mask, ys_in, hyps_lens + 1, r_ys_in, 0.3)
        golden["decoder_l2r"] = torch.log_softmax(l2r, dim=-1)
        golden["decoder_r2l"] = torch.log_softmax(r2l, dim=-1)
    golden["text"] = SAMPLE_TEXT
    golden["text_ids"] = _wenet_ids(units, out, case)
    return golden


def _sherpa_convention(enc: Any, feats: torch.Tensor, chunk: int, left: int) -> torch.Tensor:
    """WeNet's forward_chunk as its ONNX export and sherpa-onnx call it: a zero cache of C*N
    frames hidden by the mask, the offset starting at C*N (wenet/bin/export_onnx_cpu.py),
    over every complete window. (1, T, D)."""
    cached = chunk * left
    rate = enc.embed.subsampling_rate
    window = (chunk - 1) * rate + enc.embed.right_context + 1
    att = torch.zeros(len(enc.encoders), enc.encoders[0].self_attn.h, cached,
                      enc._output_size // enc.encoders[0].self_attn.h * 2)  # fmt: skip
    cnn = torch.zeros(len(enc.encoders), 1, enc._output_size,
                      enc.encoders[0].conv_module.lorder)  # fmt: skip
    mask = torch.ones(1, 1, cached + chunk, dtype=torch.bool)
    mask[:, :, :cached] = False
    offset, outs, i = cached, [], 0
    while i * chunk * rate + window <= feats.size(1):
        mask[:, :, -(chunk * (i + 1)) :] = True
        xs = feats[:, i * chunk * rate : i * chunk * rate + window]
        out, att, cnn = enc.forward_chunk(xs, offset, cached, att, cnn, mask)
        outs.append(out)
        offset += out.size(1)
        i += 1
    return torch.cat(outs, dim=1)


def _wenet_ids(units: List[str], out: Path, case: Dict[str, Any]) -> List[List[int]]:
    """WeNet's own tokenizer's ids for SAMPLE_TEXT."""
    if case["units"] == "bpe":
        from wenet.text.bpe_tokenizer import BpeTokenizer

        tokenizer = BpeTokenizer(str(out / "bpe.model"), str(out / "units.txt"))
    else:
        from wenet.text.char_tokenizer import CharTokenizer

        tokenizer = CharTokenizer(str(out / "units.txt"))
    return [tokenizer.tokenize(line)[1] for line in SAMPLE_TEXT]


def write_case(name: str, out_dir: Path, seed: int) -> None:
    case = CASES[name]
    out = out_dir / name
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    units = _units(out, case, rng)
    configs = _train_yaml(case, units, out)
    _cmvn(out, json_format=case["units"] == "bpe", rng=rng)
    model = _build(configs, case)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith(".pe")}
    torch.save(state, out / "final.pt")
    for key in ("cmvn_file",):
        if key in configs:
            configs[key] = "global_cmvn"  # as published: relative to the recipe
    if "cmvn_conf" in configs:
        configs["cmvn_conf"]["cmvn_file"] = "global_cmvn"
    (out / "train.yaml").write_text(yaml.safe_dump(configs, sort_keys=False))
    golden = _outputs(model, units, out, case, torch.Generator().manual_seed(seed))
    torch.save(golden, out / "golden.pt")
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    print(f"{name}: {len(units)} units, {size:.2f} MB in {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wenet", required=True, type=Path, help=f"WeNet's source at {PINNED}")
    p.add_argument("--out", type=Path, default=Path("tests/data/wenet"))
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args = p.parse_args()
    if not (args.wenet / "wenet" / "models" / "transformer" / "encoder.py").is_file():
        raise SystemExit(f"wenet_golden: {args.wenet} is not WeNet's source")
    _stand_ins(args.wenet.resolve())
    for i, name in enumerate(args.cases.split(",")):
        if name not in CASES:
            raise SystemExit(f"wenet_golden: no case {name!r}; cases: {', '.join(CASES)}")
        write_case(name, args.out, seed=1000 + i)


if __name__ == "__main__":
    main()
