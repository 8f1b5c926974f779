"""Export for on-device inference.

- ``torchscript.export_torchscript``: one self-describing TorchScript file (streaming
  ``forward_chunk``, full ``forward``, metadata and vocabulary) that ``examples/run_exported.py``
  runs without wenet_lite; optional dynamic int8.
- ``onnx.export_onnx``: ``model.onnx`` + ``tokens.txt`` in sherpa-onnx's streaming WeNet CTC
  interface (``OnlineRecognizer.from_wenet_ctc``); optional ``model.int8.onnx``; and
  ``batched.onnx`` with an export record for our onnxruntime engine.
- ``executorch.export_executorch``: ``model.pte`` (+ ``model.int8.pte``) lowered to XNNPACK,
  with an export record, for our executorch engine and ExecuTorch runtimes.

Submodules are imported on use so that ``import wenet_lite.export`` needs neither onnx,
onnxruntime nor executorch.
"""
