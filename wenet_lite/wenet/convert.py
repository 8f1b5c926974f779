"""A WeNet model directory as a model file of this toolkit (`wenet-lite import-wenet`).

WeNet publishes a U2/U2++ conformer as a directory: ``final.pt`` (a bare state dict),
``train.yaml`` (its training config, in the older layout with top-level ``cmvn_file`` /
``is_json_cmvn`` or the newer one with ``cmvn_conf`` / ``tokenizer_conf``), ``global_cmvn``
(JSON or Kaldi text), ``units.txt`` and, for English models, a sentencepiece ``bpe.model``.
:func:`import_wenet` reads them, builds this toolkit's model with the options that give WeNet's
arithmetic (``pos_enc: wenet``, ``conv_pad: wenet``, ``final_norm``, the decoder's ReLU and
in-vocabulary ``<sos/eos>``, ``snip_edges``, ``high_freq: 0``) and writes an ordinary model
file. Dimensions are read from the state dict and checked against ``train.yaml``; every key is
used or knowingly dropped (the position tables, recomputed here); any other key fails, named.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import yaml

from wenet_lite.config.fields import Says, Setting, literal, raised
from wenet_lite.config.loading import config_from_dict
from wenet_lite.config.schema import short_repr
from wenet_lite.data.tokenizer import WORD_START
from wenet_lite.fileio import read_json, read_text
from wenet_lite.files.model_file import check_finite, save_model
from wenet_lite.model import build_model
from wenet_lite.wenet.keys import map_decoder, map_encoder
from wenet_lite.wenet.units import SOS_EOS, read_units, wenet_tokenizer

__all__ = ["WenetImportError", "import_wenet", "wenet_model"]

log = logging.getLogger(__name__)

PathLike = Union[str, Path]
_RATES = {"conv2d": 4, "conv2d6": 6, "conv2d8": 8}
_DROPPED = (  # kinds of keys knowingly not imported, and why
    (re.compile(r"(^|\.)pos_enc\.pe$|\.embed\.1\.pe$"), "position tables (recomputed)"),
)


class WenetImportError(ValueError):
    """A WeNet model directory that cannot be imported; the message names the file or key."""


@dataclass(frozen=True)
class WenetFiles:
    """The files of a WeNet model directory."""

    weights: Path
    train_yaml: Path
    units: Path
    bpe: Optional[Path]
    cmvn: Optional[Path]


def find_files(model_dir: PathLike, bpe: Optional[PathLike] = None) -> WenetFiles:
    """The files of ``model_dir``; WenetImportError naming any that is missing."""
    root = Path(model_dir)
    if not root.is_dir():
        raise WenetImportError(f"{root}: not a directory (a WeNet model directory holds "
                               "final.pt, train.yaml, units.txt, global_cmvn)")  # fmt: skip
    for name in ("final.pt", "train.yaml", "units.txt"):
        if not (root / name).is_file():
            raise WenetImportError(f"{root}: no {name} (a WeNet model directory holds final.pt, "
                                   "train.yaml, units.txt and global_cmvn)")  # fmt: skip
    if bpe is not None:
        bpe_path: Optional[Path] = Path(bpe)
        if not bpe_path.is_file():
            raise WenetImportError(f"{bpe_path}: no such BPE model")
    else:
        models = sorted(root.glob("*.model"))
        bpe_path = root / "bpe.model" if (root / "bpe.model").is_file() else None
        if bpe_path is None and len(models) == 1:
            bpe_path = models[0]
        elif bpe_path is None and len(models) > 1:
            raise raised(
                WenetImportError,
                f"{literal(root)}: several sentencepiece models "
                f"({literal(', '.join(m.name for m in models))}); name one with {{bpe}}",
                bpe=Setting("bpe"),
            )  # fmt: skip
    cmvn = root / "global_cmvn"
    return WenetFiles(root / "final.pt", root / "train.yaml", root / "units.txt", bpe_path,
                      cmvn if cmvn.is_file() else None)  # fmt: skip


def wenet_model(
    model_dir: PathLike, norm_eps: Optional[float] = None, bpe: Optional[PathLike] = None
) -> Tuple[Any, Any, Any, List[str]]:
    """The model, tokenizer and config of a WeNet model directory, and the dropped key kinds.

    ``norm_eps`` is the LayerNorm epsilon WeNet used when the model was trained: 1e-5 since
    2022, 1e-12 before (checkpoints do not record it). None: chosen from the evidence
    (``wenet_download.guess_norm_eps``), with a warning when there is none.
    """
    files = find_files(model_dir, bpe)
    train = _read_yaml(files.train_yaml)
    if norm_eps is None:
        norm_eps = _chosen_eps(model_dir, train)
    state = _read_state(files.weights)
    units = read_units(files.units)
    _check_model_kind(train, files.train_yaml)
    dims = _dims(state, files.weights)
    _check_against_yaml(dims, train, files.train_yaml)
    if dims["vocab"] != len(units):
        raise WenetImportError(
            f"{files.units}: {len(units)} units, but the CTC layer of {files.weights} has "
            f"{dims['vocab']} outputs (ctc.ctc_lo.weight); the units file belongs to another model"
        )
    units_bpe = any(u.startswith(WORD_START) for u in units)
    bpe_path = files.bpe
    tokenizer_kind = train.get("tokenizer")
    pieces_only = False
    if tokenizer_kind == "char" or (tokenizer_kind is None and not units_bpe):
        bpe_path = None
    elif bpe_path is None:
        pieces_only = True
        log.warning(
            Says("%s: BPE units without bpe.model: imported for decoding (exact); hotwords, LM "
                 "words and training from it cut text into the longest matching units, not "
                 "WeNet's pieces: give the BPE model with {bpe} for those", bpe=Setting("bpe")),
            Path(model_dir),
        )  # fmt: skip
    tokenizer = wenet_tokenizer(files.units, bpe_path, pieces_only)
    bpe = bpe_path is not None or pieces_only
    cfg = config_from_dict(_config(dims, train, units, norm_eps, bpe))
    model = build_model(cfg, tokenizer.vocab_size)
    _ensure_cmvn(state, files, train)
    mapped = map_encoder(state, dims["d_model"])
    if dims["decoder_blocks"]:
        mapped.update(map_decoder(state, dims["left"], "decoder.l2r"))
        if dims["r2l_blocks"]:
            mapped.update(map_decoder(state, "decoder.right_decoder", "decoder.r2l.0"))
    dropped = _drop_known(state)
    if state:
        names = sorted(state)
        raise WenetImportError(
            f"{files.weights}: {len(names)} key(s) this importer does not know: "
            f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
        )
    mapped = {k: v.float() if v.is_floating_point() else v for k, v in mapped.items()}
    try:
        check_finite(mapped, files.weights)
    except ValueError as e:
        raise WenetImportError(str(e)) from None
    try:
        model.load_state_dict(mapped, strict=True)
    except RuntimeError as e:
        raise WenetImportError(f"{files.weights}: the weights do not fit: {e}") from None
    return model.eval(), tokenizer, cfg, dropped


def _chosen_eps(model_dir: PathLike, train: Dict[str, Any]) -> float:
    from wenet_lite.wenet.download import guess_norm_eps

    eps, why, certain = guess_norm_eps(model_dir, train)
    if certain:
        log.info("%s: LayerNorm epsilon %g (%s)", model_dir, eps, why)
    else:
        log.warning(
            Says("%s: LayerNorm epsilon %g is a guess (%s); a model trained before 2022-01 "
                 "needs {eps}, and a wrong value is silent (outputs drift a little)",
                 eps=Setting("norm_eps", "1e-12")),
            model_dir, eps, why,
        )  # fmt: skip
    return eps


def import_wenet(
    model_dir: PathLike,
    out: PathLike,
    norm_eps: Optional[float] = None,
    bpe: Optional[PathLike] = None,
) -> Path:
    """Write the model file of a WeNet model directory to ``out``; returns ``out``."""
    model, tokenizer, cfg, dropped = wenet_model(model_dir, norm_eps, bpe)
    out = Path(out)
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    save_model(out, model, cfg, tokenizer)
    enc = cfg.encoder
    params = sum(p.numel() for p in model.parameters())
    log.info(
        "imported %s: conformer %d x %d, %d heads, kernel %d, rate %d, %d units, "
        "decoder %d+%d blocks, %.1f M parameters%s", model_dir, enc.num_blocks, enc.d_model,
        enc.num_heads, enc.conv_kernel, enc.subsampling_rate, tokenizer.vocab_size,
        cfg.decoder.num_blocks if cfg.decoder.type != "none" else 0,
        cfg.decoder.r2l_num_blocks if cfg.decoder.type != "none" else 0, params / 1e6,
        f"; dropped: {', '.join(dropped)}" if dropped else "",
    )  # fmt: skip
    return out


def _read_yaml(path: Path) -> Dict[str, Any]:
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as e:
        raise WenetImportError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise WenetImportError(f"{path}: expected a mapping of training options")
    _check_types(data, "", path)
    return data


_SECTIONS = ("encoder_conf", "decoder_conf", "dataset_conf", "model_conf", "cmvn_conf",
             "dataset_conf.fbank_conf", "dataset_conf.resample_conf")  # fmt: skip
"""the sections of train.yaml this importer reads (each a mapping, or absent)"""
_TYPES: Dict[str, type] = {
    "model": str, "encoder": str, "decoder": str, "tokenizer": str, "output_dim": int,
    "cmvn_file": str, "cmvn_conf.cmvn_file": str,
    **{f"encoder_conf.{k}": int for k in ("output_size", "attention_heads", "linear_units",
                                         "num_blocks", "cnn_module_kernel", "static_chunk_size")},
    **{f"encoder_conf.{k}": float for k in ("dropout_rate", "attention_dropout_rate")},
    **{f"encoder_conf.{k}": bool for k in ("causal", "use_dynamic_chunk")},
    "encoder_conf.input_layer": str, "encoder_conf.cnn_module_norm": str,
    **{f"decoder_conf.{k}": int for k in ("num_blocks", "r_num_blocks", "attention_heads",
                                         "linear_units")},
    "decoder_conf.dropout_rate": float,
    **{f"dataset_conf.fbank_conf.{k}": float for k in ("frame_length", "frame_shift", "dither")},
    "dataset_conf.fbank_conf.num_mel_bins": int, "dataset_conf.resample_conf.resample_rate": int,
    "dataset_conf.spec_aug": bool,
    **{f"model_conf.{k}": float for k in ("ctc_weight", "reverse_weight", "lsm_weight")},
}  # fmt: skip
"""the type of every value of train.yaml this importer reads"""


def _check_types(data: Dict[str, Any], prefix: str, path: Path) -> None:
    """Sections are mappings and read values of their types (a number written as YAML 1.1
    reads it, ``1e-5``, becomes a float), in place; WenetImportError naming the file and the
    key, the value shown cut short (an anchor bomb is never walked)."""
    for key, value in list(data.items()):
        dotted = f"{prefix}{key}"
        if value is None:
            continue
        if dotted in _SECTIONS:
            if not isinstance(value, dict):
                raise WenetImportError(f"{path}: {dotted} must be a mapping, got "
                                       f"{type(value).__name__} {short_repr(value)}")  # fmt: skip
            _check_types(value, f"{dotted}.", path)
        elif dotted in _TYPES:
            data[key] = _typed(value, _TYPES[dotted], dotted, path)


def _typed(value: Any, kind: type, key: str, path: Path) -> Any:
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if kind is float and not isinstance(value, bool):
        if isinstance(value, int):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    if not ok:
        names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
        raise WenetImportError(f"{path}: {key} must be {names[kind]}, got "
                               f"{type(value).__name__} {short_repr(value)}")  # fmt: skip
    return value


def _read_state(path: Path) -> Dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle, zip and unpickler errors alike
        if "Weights only load failed" in str(e):  # torch's text suggests loading it unsafely
            raise WenetImportError(
                f"{path}: holds Python objects, not only tensors (refused: loading them could "
                "run code)"
            ) from None
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise WenetImportError(f"{path}: not a readable PyTorch state dict ({first})") from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]  # a training checkpoint with the weights under "model"
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WenetImportError(f"{path}: expected a state dict of tensors")
    return {k[len("module.") :] if k.startswith("module.") else k: v for k, v in state.items()}


def _check_model_kind(train: Dict[str, Any], path: Path) -> None:
    """Only WeNet's conformer with CTC (and an attention decoder) has a counterpart here."""
    model = train.get("model", "asr_model")
    encoder = train.get("encoder", "conformer")
    supported = ("supported: WeNet's U2/U2++ conformer (encoder: conformer, model: asr_model, "
                 "decoder: bitransformer or transformer)")  # fmt: skip
    if model == "transducer":  # examples/*/rnnt: an LSTM or attention-over-history predictor
        raise WenetImportError(
            f"{path}: model 'transducer' cannot be imported: WeNet's predictors (an LSTM, or "
            "attention over the last tokens) keep a state this toolkit's stateless predictor "
            f"has no place for; {supported}, to which training with model.transducer_weight "
            "adds this toolkit's transducer head (docs/heads.md)"
        )
    if model != "asr_model":
        raise WenetImportError(f"{path}: model '{model}' cannot be imported; {supported}")
    if encoder != "conformer":
        raise WenetImportError(f"{path}: encoder '{encoder}' cannot be imported; {supported}")
    decoder = train.get("decoder", "bitransformer")
    if decoder not in ("bitransformer", "transformer"):
        raise WenetImportError(f"{path}: decoder '{decoder}' cannot be imported; {supported}")
    conf = train.get("encoder_conf") or {}
    needs = {  # option: (WeNet's default, the only value with a counterpart here)
        "normalize_before": (True, True), "macaron_style": (True, True),
        "use_cnn_module": (True, True), "activation_type": ("swish", "swish"),
        "pos_enc_layer_type": ("rel_pos", "rel_pos"),
        "selfattention_layer_type": ("rel_selfattn", "rel_selfattn"),
    }  # fmt: skip
    for key, (default, wanted) in needs.items():
        if conf.get(key, default) != wanted:
            said = short_repr(conf.get(key))
            raise WenetImportError(f"{path}: encoder_conf.{key} is {said}; only "
                                   f"{wanted!r} can be imported")  # fmt: skip
    layer = conf.get("input_layer", "conv2d")
    if layer not in _RATES:
        raise WenetImportError(f"{path}: encoder_conf.input_layer '{layer}' cannot be imported; "
                               f"supported: {', '.join(_RATES)}")  # fmt: skip


def _dims(state: Dict[str, torch.Tensor], path: Path) -> Dict[str, Any]:
    """The model's dimensions, read from its weights."""

    def need(key: str) -> torch.Tensor:
        if key not in state:
            raise WenetImportError(f"{path}: no {key}; not the weights of a WeNet conformer")
        return state[key]

    blocks = sorted({int(k.split(".")[2]) for k in state if k.startswith("encoder.encoders.")})
    if not blocks:
        raise WenetImportError(f"{path}: no encoder.encoders.* keys; not a WeNet conformer")
    first = "encoder.encoders.0"
    pos_u = need(f"{first}.self_attn.pos_bias_u")
    depthwise = need(f"{first}.conv_module.depthwise_conv.weight")
    if "encoder.embed.conv.4.weight" in state:
        rate = 8
    elif "encoder.embed.conv.2.weight" in state:
        rate = 6 if state["encoder.embed.conv.2.weight"].size(-1) == 5 else 4
    else:
        raise WenetImportError(f"{path}: no encoder.embed.conv.2.weight; unknown subsampling")
    left = (
        "decoder.left_decoder" if "decoder.left_decoder.embed.0.weight" in state else ("decoder")
    )  # WeNet's "transformer" decoder: one left-to-right decoder at decoder.*
    left_blocks = _count(state, f"{left}.decoders.")
    right_blocks = _count(state, "decoder.right_decoder.decoders.")
    ffn_dec = need(f"{left}.decoders.0.feed_forward.w_1.weight").size(0) if left_blocks else 0
    return {
        "d_model": pos_u.numel(),
        "num_heads": pos_u.size(0),
        "ffn_dim": need(f"{first}.feed_forward.w_1.weight").size(0),
        "num_blocks": len(blocks),
        "conv_kernel": depthwise.size(-1),
        "conv_norm": "batch_norm"
        if f"{first}.conv_module.norm.running_mean" in state
        else "layer_norm",
        "subsampling_rate": rate,
        "vocab": need("ctc.ctc_lo.weight").size(0),
        "decoder_blocks": left_blocks,
        "r2l_blocks": right_blocks,
        "decoder_ffn": ffn_dec,
        "left": left,
    }


def _count(state: Dict[str, torch.Tensor], prefix: str) -> int:
    """How many numbered layers ``prefix<n>.*`` the weights hold."""
    return len({k[len(prefix) :].split(".")[0] for k in state if k.startswith(prefix)})


def _check_against_yaml(dims: Dict[str, Any], train: Dict[str, Any], path: Path) -> None:
    """train.yaml's dimensions must be the weights' (a mismatched pair is named)."""
    enc = train.get("encoder_conf") or {}
    dec = train.get("decoder_conf") or {}
    pairs = [
        ("encoder_conf.output_size", enc.get("output_size"), dims["d_model"]),
        ("encoder_conf.attention_heads", enc.get("attention_heads"), dims["num_heads"]),
        ("encoder_conf.linear_units", enc.get("linear_units"), dims["ffn_dim"]),
        ("encoder_conf.num_blocks", enc.get("num_blocks"), dims["num_blocks"]),
        ("encoder_conf.cnn_module_kernel", enc.get("cnn_module_kernel"), dims["conv_kernel"]),
        ("encoder_conf.input_layer", _RATES.get(enc.get("input_layer", "conv2d")),
         dims["subsampling_rate"]),
        ("output_dim", train.get("output_dim"), dims["vocab"]),
    ]  # fmt: skip
    if dims["decoder_blocks"]:
        pairs.append(("decoder_conf.num_blocks", dec.get("num_blocks"), dims["decoder_blocks"]))
        pairs.append(("decoder_conf.linear_units", dec.get("linear_units"), dims["decoder_ffn"]))
        if dims["r2l_blocks"]:
            said = dec.get("r_num_blocks")
            pairs.append(("decoder_conf.r_num_blocks", said, dims["r2l_blocks"]))
    norm = enc.get("cnn_module_norm", "batch_norm")
    pairs.append(("encoder_conf.cnn_module_norm", norm, dims["conv_norm"]))
    for key, said, found in pairs:
        if said is not None and said != found:
            raise WenetImportError(f"{path}: {key} is {said}, but the weights have {found}")


def _config(
    dims: Dict[str, Any], train: Dict[str, Any], units: List[str], eps: float, bpe: bool
) -> Dict[str, Any]:
    enc = train.get("encoder_conf") or {}
    dec = train.get("decoder_conf") or {}
    fbank = (train.get("dataset_conf") or {}).get("fbank_conf") or {}
    model_conf = train.get("model_conf") or {}
    causal = bool(enc.get("causal", False))
    if int(enc.get("static_chunk_size", 0) or 0) > 0 and causal:
        chunk = {"mode": "static", "size": int(enc["static_chunk_size"])}
    elif enc.get("use_dynamic_chunk", False) and causal:
        chunk = {"mode": "dynamic"}
    else:
        chunk = {"mode": "full"}
    reverse = float(model_conf.get("reverse_weight", 0.0)) if dims["r2l_blocks"] else 0.0
    decoder: Dict[str, Any] = {"type": "none"}
    if dims["decoder_blocks"]:
        decoder = {
            "type": "bitransformer", "num_blocks": dims["decoder_blocks"],
            "r2l_num_blocks": dims["r2l_blocks"],
            "num_heads": int(dec.get("attention_heads", dims["num_heads"])),
            "ffn_dim": dims["decoder_ffn"], "dropout": float(dec.get("dropout_rate", 0.1)),
            "activation": "relu", "norm_eps": eps, "sos_eos_id": units.index(SOS_EOS),
        }  # fmt: skip
    return {
        "features": {
            "num_mel_bins": int(fbank.get("num_mel_bins", 80)),
            "frame_length_ms": float(fbank.get("frame_length", 25)),
            "frame_shift_ms": float(fbank.get("frame_shift", 10)),
            "dither": float(fbank.get("dither", 1.0)),
            "snip_edges": True, "high_freq": 0.0,
            "sample_rate": int(((train.get("dataset_conf") or {}).get("resample_conf") or {})
                               .get("resample_rate", 16000)),
        },
        "specaug": {"enabled": bool((train.get("dataset_conf") or {}).get("spec_aug", True))},
        "encoder": {
            "d_model": dims["d_model"], "num_heads": dims["num_heads"],
            "ffn_dim": dims["ffn_dim"], "num_blocks": dims["num_blocks"],
            "subsampling_rate": dims["subsampling_rate"], "conv_kernel": dims["conv_kernel"],
            "causal_conv": causal, "conv_norm": dims["conv_norm"], "pos_enc": "wenet",
            "dropout": float(enc.get("dropout_rate", 0.1)),
            "attention_dropout": float(enc.get("attention_dropout_rate", 0.0)),
            "final_norm": True, "norm_eps": eps, "conv_pad": "wenet" if causal else "zero",
            "chunk": chunk,
        },
        "decoder": decoder,
        "model": {
            "ctc_weight": float(model_conf.get("ctc_weight", 0.3)), "reverse_weight": reverse,
            "lsm_weight": float(model_conf.get("lsm_weight", 0.1)),
        },
        "tokenizer": {"model_type": "bpe" if bpe else "char", "vocab_size": len(units)},
    }  # fmt: skip


def _ensure_cmvn(state: Dict[str, torch.Tensor], files: WenetFiles, train: Dict[str, Any]) -> None:
    """The CMVN buffers are in the weights of every WeNet model trained with CMVN; a model
    whose weights lack them gets them from its ``global_cmvn``, or none (identity)."""
    if "encoder.global_cmvn.mean" in state:
        return
    named = train.get("cmvn_file") or (train.get("cmvn_conf") or {}).get("cmvn_file")
    dim = int(((train.get("dataset_conf") or {}).get("fbank_conf") or {}).get("num_mel_bins", 80))
    if not named:
        state["encoder.global_cmvn.mean"] = torch.zeros(dim)
        state["encoder.global_cmvn.istd"] = torch.ones(dim)
        return
    if files.cmvn is None:
        raise WenetImportError(f"{files.train_yaml.parent}: train.yaml names a CMVN file and "
                               "the weights hold no CMVN, but there is no global_cmvn")  # fmt: skip
    mean, istd = read_wenet_cmvn(files.cmvn)
    state["encoder.global_cmvn.mean"], state["encoder.global_cmvn.istd"] = mean, istd


def read_wenet_cmvn(path: PathLike) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean and inverse standard deviation from WeNet's ``global_cmvn`` (JSON with
    ``mean_stat``/``var_stat``/``frame_num``, or Kaldi's text matrix), as WeNet computes them
    (variance floored at 1e-20)."""
    path = Path(path)
    text = read_text(path)
    stats = read_json(path) if text.lstrip().startswith("{") else None  # names its own errors
    try:
        if stats is not None:
            total = torch.tensor(stats["mean_stat"], dtype=torch.float64)
            squares = torch.tensor(stats["var_stat"], dtype=torch.float64)
            count = float(stats["frame_num"])
        else:
            numbers = [float(x) for x in text.replace("[", " ").replace("]", " ").split()]
            if len(numbers) < 4 or len(numbers) % 2:
                raise ValueError(f"a Kaldi matrix of 2 rows holds {len(numbers)} number(s)")
            half = len(numbers) // 2
            total = torch.tensor(numbers[: half - 1], dtype=torch.float64)
            count = numbers[half - 1]
            squares = torch.tensor(numbers[half : 2 * half - 1], dtype=torch.float64)
    except (KeyError, ValueError, TypeError) as e:
        raise WenetImportError(f"{path}: not WeNet CMVN statistics ({e})") from None
    if count <= 0 or total.numel() == 0 or total.numel() != squares.numel():
        raise WenetImportError(f"{path}: not WeNet CMVN statistics (count {count})")
    if not (torch.isfinite(total).all() and torch.isfinite(squares).all()) or not count < 1e300:
        raise WenetImportError(f"{path}: CMVN statistics hold NaN or infinity")
    mean = total / count
    var = (squares / count - mean * mean).clamp(min=1e-20)
    return mean.float(), (1.0 / var.sqrt()).float()


def _drop_known(state: Dict[str, torch.Tensor]) -> List[str]:
    """Remove the keys imported on purpose as nothing; returns the kinds dropped."""
    kinds = []
    for pattern, kind in _DROPPED:
        keys = [k for k in state if pattern.search(k)]
        for k in keys:
            del state[k]
        if keys:
            kinds.append(kind)
    return kinds
