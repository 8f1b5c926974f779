"""Weights read from a file, checked before a model is built from them: against the shapes of
a skeleton built on the meta device (no memory), the data actually stored behind them, and
finiteness. Every loader of weights (model files, WeNet checkpoints, punctuation models) asks
:func:`weights_problem` and raises its own error naming the file.

Stored data matters because a tensor in a file can be a view: one value expanded to any shape,
or many weights viewing one block (a 134 MB file whose config made 14.5 GB of model); either
would have the model built, and memory given, for data the file does not hold.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

__all__ = ["weights_problem"]


def weights_problem(expected: Mapping[str, Any], state: Mapping[str, Any]) -> Optional[str]:
    """What is wrong with the tensors ``state`` for a model whose state dict is ``expected``
    (tensors of the right shapes, e.g. on the meta device), or None: the first name missing or
    unexpected, the first shape that differs, a weight that claims more values than the file
    stores (alone, or with others viewing the same block; the same view under two names, tied
    weights, counts once), the first floating-point weight with NaN or infinity."""
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        what = (f"lacks {missing[0]}" if missing else
                f"has {unexpected[0]}, which the model of its config does not have")  # fmt: skip
        more = len(missing) + len(unexpected) - 1
        others = f" (and {more} other name(s) differ)" if more else ""
        return f"weights do not match its config: it {what}{others}"
    for key, want in expected.items():
        got = state[key]
        if tuple(got.shape) != tuple(want.shape):
            return (f"weights do not match its config: {key} is {tuple(got.shape)}, the config "
                    f"makes it {tuple(want.shape)}")  # fmt: skip
        stored = got.untyped_storage().nbytes()
        if stored < got.numel() * got.element_size():  # e.g. one value expanded to a shape
            held = stored // max(got.element_size(), 1)
            return (f"weight {key} claims {got.numel()} values but the file stores {held}: not "
                    "weights a model saved")  # fmt: skip
    return _shared_problem(state) or finite_problem(state)


def _shared_problem(state: Mapping[str, Any]) -> Optional[str]:
    claimed: Dict[int, Dict[tuple, int]] = {}
    sizes: Dict[int, int] = {}
    for value in state.values():
        storage = value.untyped_storage()
        key = storage.data_ptr()
        view = (value.storage_offset(), tuple(value.shape), tuple(value.stride()), value.dtype)
        claimed.setdefault(key, {})[view] = value.numel() * value.element_size()
        sizes[key] = storage.nbytes()
    for key, views in claimed.items():
        if len(views) > 1 and sum(views.values()) > sizes[key]:
            names = [k for k, v in state.items() if v.untyped_storage().data_ptr() == key]
            return (f"weights {names[0]} and {names[1]} (and {len(names) - 2} more) are views "
                    f"of one stored block of {sizes[key]} bytes that claim "
                    f"{sum(views.values())}: not weights a model saved")  # fmt: skip
    return None


def finite_problem(state: Mapping[str, Any]) -> Optional[str]:
    """The first floating-point weight with NaN or infinity, said, or None."""
    for key, value in state.items():
        if value.is_floating_point():
            bad = int((~value.isfinite()).sum())
            if bad:
                return (f"weight {key} holds {bad} NaN or infinite value(s) of {value.numel()}: "
                        "the model would decode to nothing")  # fmt: skip
    return None
