"""Encoders, pooling and offline model resolution."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    **dict.fromkeys(("choose_path", "cpu_features", "host_class"), "lmplatform.models.encode_path"),
    "load_tokenizer": "lmplatform.models.encoder",
    "export_model": "lmplatform.models.export",
    "encoder_heads": "lmplatform.models.long_texts",
    "MaskedLanguageModel": "lmplatform.models.masked_lm",
    **dict.fromkeys(("export_onnx", "quantize_onnx"), "lmplatform.models.onnx_backend"),
    **dict.fromkeys(("CALIBRATION_SIZE", "export_openvino", "quantize_openvino"), "lmplatform.models.openvino_backend"),
    "native_bf16": "lmplatform.models.precision",
    **dict.fromkeys(("download_model", "packaged_model_path", "resolve_model_path"), "lmplatform.models.resolve"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
