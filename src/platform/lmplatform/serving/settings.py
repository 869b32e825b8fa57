"""The serving application's settings: the `args` of `serve/config.yaml` and of `lmp serve run`.

Validated on the driver before anything is deployed; a bad value raises
`ServeConfigError` naming the field, the value and what is allowed.
"""
from __future__ import annotations

import hashlib
from typing import Any, Literal, Optional

from pydantic import Field, ValidationError, field_validator, model_validator

from lmplatform.config.base import Section
from lmplatform.serving.schemas import ServeLimits

DEFAULT_TOKEN_ENV = "LMP_SERVE_TOKEN"


class ServeConfigError(ValueError):
    """Invalid serving settings (the message names the field)."""


class BatchingSettings(Section):
    enabled: bool = Field(True, description="Group concurrent requests into one forward pass with @serve.batch. "
                          "Off: each request is encoded on its own (the benchmark's baseline).")
    max_batch_size: int = Field(32, ge=2, le=4096, description="Most texts in one forward pass (>= 2: /v1/similarity sends two).")
    batch_wait_timeout_s: float = Field(0.0, ge=0.0, le=5.0, description="How long a partial batch waits for more requests. "
                                        "0 suits CPU replicas: a forward pass costs the same per text at batch 1 as at 32, so "
                                        "waiting only adds latency, and under load batches fill while the previous one runs. "
                                        "On a GPU, 2-10 ms lets batches fill.")


class EncoderSettings(Section):
    """How the retriever replicas run the bi-encoder (the same vectors either way, see models/encoder.py)."""

    backend: Literal["torch", "onnx", "openvino", "auto"] = Field(
        "torch", description="'onnx': ONNX Runtime on the model's graph; 'openvino': OpenVINO (the `openvino` extra). "
        "An `lmp export` folder of that backend is used as it is (an openvino-int8 one runs int8); any other model is "
        "converted when a replica loads it. 'auto': the fastest of them on the replica's host, with its quantization "
        "and precision, timed once per host and model and cached (models/encode_path.py; /v1/model says which).")
    auto_int8: bool = Field(True, description="backend 'auto': whether int8 paths (ONNX int8) are candidates. Their "
                            "vectors differ a little from fp32 ones (drops within 0.005 measured).")
    quantize: Optional[Literal["int8"]] = Field(None, description="'int8': dynamically quantized weights (CPU; "
                                                "slightly different vectors: build the index with the same setting). "
                                                "OpenVINO's int8 is static, calibrated at export: serve an "
                                                "`lmp export --format openvino-int8` folder instead.")
    precision: Literal["fp32", "bf16", "auto"] = Field("fp32", description="The forward passes' type (torch and "
                                                       "openvino): 'auto' is bf16 on a CPU with AVX512-BF16 or AMX, "
                                                       "else fp32 (models/precision.py); onnx and int8 torch run fp32.")

    @model_validator(mode="after")
    def _quantize_where_it_runs(self) -> "EncoderSettings":
        if self.backend == "auto" and (self.quantize is not None or self.precision != "fp32"):
            field = "quantize" if self.quantize is not None else "precision"
            raise ValueError(f"encoder.{field}: backend 'auto' chooses quantization and precision itself; leave "
                             f"{field} unset (encoder.auto_int8: false keeps int8 out)")
        if self.backend == "openvino" and self.quantize is not None:
            raise ValueError("encoder.quantize: backend 'openvino' quantizes statically at export, on calibration "
                             "texts; serve an `lmp export --format openvino-int8` folder and leave quantize unset")
        if self.precision == "bf16" and (self.backend == "onnx" or self.quantize is not None):
            raise ValueError(f"encoder.precision 'bf16' runs on fp32 torch or openvino encoders, not backend "
                             f"{self.backend!r}{' with quantize int8' if self.quantize else ''}; use 'fp32' or 'auto'")
        return self


class LiveSettings(Section):
    """Documents added and removed while serving (POST/GET/DELETE /v1/documents); see docs/serving.md#live-index."""

    dir: Optional[str] = Field(None, min_length=1, description="Folder of the change log and its snapshots: a local "
                               "folder on one machine, shared storage reachable from the writer's node on a cluster. "
                               "One application per folder. Unset: the index is read-only and /v1/documents answers 404.")
    fields: list[Literal["title", "text"]] = Field(["title", "text"], min_length=1, description="The document fields "
                                                   "joined with '. ' that are encoded and BM25-indexed (ray_jobs/build_index.py "
                                                   "--fields): the base index must have been built from the same ones.")
    snapshot_every: int = Field(10_000, ge=1, description="Changes between snapshots (the log is compacted into the "
                                "last change of each document, and a new log file starts).")
    read_wait_s: float = Field(2.0, gt=0, le=60.0, description="How long a read (search, GET, classification) waits "
                               "for the writer's newer changes. Past it, or with the writer down, the replica answers "
                               "from the changes it has applied and says so (as_of_seq, caught_up); a request's "
                               "min_seq beyond them is a 503.")
    read_retry_s: float = Field(1.0, gt=0, le=60.0, description="After the writer did not answer a read in "
                                "read_wait_s, reads stop asking it and answer at once from the changes applied "
                                "(caught_up: false); every read_retry_s one catch-up is tried in the background, and "
                                "the first that succeeds lets reads ask again.")
    write_wait_s: float = Field(30.0, gt=0, le=600.0, description="How long a write waits for the writer (a restarted "
                                "writer replays its log first). Past it the answer is 503 with Retry-After, and the "
                                "write may still have been applied: a retry of an upsert is harmless.")
    rebuild_actors: int = Field(1, ge=1, description="Ray Data encoder actors of a rebuild (the new champion's index); "
                                "one: a collection of up to 2,000 documents is encoded by the rebuild itself.")
    rebuild_cpus: float = Field(1.0, gt=0, description="CPUs per rebuild actor: leave them free beside the replicas.")
    rebuild_batch_size: int = Field(64, ge=1, description="Texts per forward pass in a rebuild.")

    @field_validator("fields")
    @classmethod
    def _distinct(cls, fields: list[str]) -> list[str]:
        if len(set(fields)) != len(fields):
            raise ValueError(f"names a field twice: {fields}")
        return fields

    @property
    def enabled(self) -> bool:
        return self.dir is not None


class ServeSettings(Section):
    """Everything the application needs to start; see docs/serving.md."""

    model: str = Field(..., min_length=1, description="models:/<name>@<alias> (e.g. @champion), models:/<name>/<version>, "
                       "a model folder, or 'default' (the packaged MiniLM).")
    tracking_uri: Optional[str] = Field(None, description="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite at "
                                        "<project>/mlruns/mlflow.db).")
    index: Optional[str] = Field(None, description="Folder of a saved VectorIndex (ray_jobs/build_index.py). Default: the "
                                 "`index_artifact` of the model version's MLflow run.")
    index_artifact: str = Field("index", min_length=1, description="Artifact path of the index in the model's run.")
    documents: Optional[str] = Field(None, description="Document store JSONL (id, title, text[, label]). "
                                     "Default: documents.jsonl inside the index folder.")
    reranker: Optional[str] = Field(None, description="Cross-encoder folder or models:/ URI; unset: no re-ranking.")
    knn_k: int = Field(10, ge=1, le=200, description="Neighbours that vote when the model has no classifier head.")
    encoder: EncoderSettings = Field(default_factory=EncoderSettings)
    limits: ServeLimits = Field(default_factory=ServeLimits)
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    num_threads: Optional[int] = Field(None, ge=1, description="torch threads per replica (default: Ray's OMP_NUM_THREADS).")
    auth_token_sha256: Optional[str] = Field(None, pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the bearer token "
                                             "requests must carry (set from $LMP_SERVE_TOKEN by `lmp serve run`; "
                                             "the token itself never enters the Serve config).")
    cache_dir: Optional[str] = Field(None, description="Where replicas keep downloaded models and indexes "
                                     "(default: ~/.cache/lmplatform/serve).")
    replica_cpus: Optional[float] = Field(None, gt=0, description="num_cpus of every replica unless the config's "
                                          "deployments section says otherwise.")
    live: LiveSettings = Field(default_factory=LiveSettings)

    @model_validator(mode="after")
    def _one_request_fits_a_batch(self) -> "ServeSettings":
        if self.limits.max_texts > self.batching.max_batch_size:
            raise ValueError(f"limits.max_texts ({self.limits.max_texts}) must be <= batching.max_batch_size "
                             f"({self.batching.max_batch_size}): one request must fit in one batch")
        if self.live.enabled and self.limits.max_documents > self.batching.max_batch_size:
            raise ValueError(f"limits.max_documents ({self.limits.max_documents}) must be <= batching.max_batch_size "
                             f"({self.batching.max_batch_size}): one request's documents are encoded in one batch")
        return self


def parse_settings(args: dict[str, Any]) -> ServeSettings:
    """Settings from a plain dict, or a `ServeConfigError` naming each bad field."""
    try:
        return ServeSettings.model_validate(args)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"]) or "(settings)"
            value = error.get("input")
            shown = "" if isinstance(value, dict) else f" (got {value!r})"
            problems.append(f"{field}: {error['msg']}{shown}")
        raise ServeConfigError("invalid serve settings: " + "; ".join(problems)) from None


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
