"""Model components: masks, subsampling, relative positions, attention, conv, Conformer, CTC,
streaming state, chunk settings. Shapes: the legend in ``wenet_lite``'s docstring."""

from wenet_lite.model.asr import ASRModel, build_model
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.ctc import CTCHead

__all__ = ["ASRModel", "build_model", "ConformerEncoder", "CTCHead"]
