"""`backend: auto`: the fastest way to encode with a model on this host, chosen by timing each candidate once.

Which path is fastest depends on the CPU more than on anything else (docs/benchmarks.md#encoding-throughput): on an
AMX host OpenVINO int8 ran 4.61x sentence-transformers fp32, on an AVX2-only host 1.22x, behind ONNX int8 (1.99x).
So no fixed default holds on every host, and `auto` measures instead of guessing:

1. The candidates (`candidate_paths`): torch fp32; torch bf16 and OpenVINO bf16 where the CPU multiplies bf16 in
   hardware (AVX512-BF16 or AMX; emulated bf16 is slower than fp32); ONNX fp32 and int8, OpenVINO fp32, where their
   runtime is installed; OpenVINO int8 where calibration texts are given (its int8 is static), and with bf16 for
   what is not int8 where bf16 is native. Every one of them stayed within 0.005 of fp32 on STS-B Spearman and
   OpenOffice MRR@10. torch's dynamic int8 is left out: its STS-B drop was 0.007.
2. Each is loaded and encodes `TIMED_BATCHES` batches of the model's own shape (`batch_size` texts of its
   `max_seq_length` tokens) once to warm up, then `rounds` times; its time is the fastest round per batch
   (`time_encoding`). Several batches, as an index build or a backfill sends them: a runtime that keeps batches in
   flight (OpenVINO) gets its due.
3. The fastest wins. The choice is cached per host (CPU model, its features, threads, library versions) and model
   (the folder's files by content): a replica that starts again on the same host loads the winner only.
   Deleting the cache file times again.

The int8 and bf16 paths give vectors a little different from fp32 ones: an index is best built with the same choice
(`ray_jobs/build_index.py --backend auto` on the serving hosts' class).
"""
from __future__ import annotations

import gc
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder

logger = logging.getLogger(__name__)

RUNTIMES = {"torch": "torch", "onnx": "onnxruntime", "openvino": "openvino"}  # backend -> the module it needs
BF16_FEATURES = ("avx512_bf16", "amx_bf16")
HOST_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
CACHE_ENV = "LMP_CACHE_DIR"
CACHE_FILE = "encode_paths.json"


@dataclass(frozen=True)
class EncodePath:
    """One way to run an encoder: `Encoder.from_pretrained(backend=, quantize=)` encoding at `precision`."""

    backend: str
    quantize: Optional[str] = None
    precision: str = "fp32"

    @property
    def label(self) -> str:
        """'torch fp32', 'onnx int8', 'openvino int8 bf16' (int8 layers, bf16 elsewhere)."""
        mixed = f" {self.precision}" if self.quantize and self.precision != "fp32" else ""
        return f"{self.backend} {self.quantize or self.precision}{mixed}"


Timer = Callable[["Encoder", list[str], int], float]  # (encoder, texts, batch size) -> seconds per batch
TIMED_BATCHES = 4


@dataclass
class PathChoice:
    """What `choose_path` chose, and why: each candidate's seconds per batch (empty when read from the cache)."""

    path: EncodePath
    host: str
    seconds: dict[str, float] = field(default_factory=dict)
    cached: bool = False

    def summary(self) -> dict[str, object]:
        return {"chosen": self.path.label, "host": self.host, "cached": self.cached,
                "ms_per_batch": {label: round(s * 1000, 2) for label, s in self.seconds.items()}}


def cpu_features() -> set[str]:
    """This CPU's flags among HOST_FEATURES (none where /proc/cpuinfo is not there)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return set()
    return flags & set(HOST_FEATURES)


def host_class(features: set[str]) -> str:
    """The class a CPU speed figure holds for: amx, avx512_bf16, avx512_vnni, avx2 or other."""
    for name in ("amx_int8", "avx512_bf16", "avx512_vnni", "avx2"):
        if name in features:
            return "amx" if name == "amx_int8" else name
    return "other"


def installed_backends() -> set[str]:
    return {backend for backend, module in RUNTIMES.items() if importlib.util.find_spec(module) is not None}


def candidate_paths(features: set[str], installed: set[str], backends: Sequence[str], int8: bool,
                    calibrated: bool) -> list[EncodePath]:
    """The paths `auto` times on a CPU with `features`, among `backends` that are `installed` (the module doc)."""
    bf16 = any(flag in features for flag in BF16_FEATURES)
    paths = [EncodePath("torch"), EncodePath("torch", precision="bf16") if bf16 else None,
             EncodePath("onnx"), EncodePath("onnx", "int8") if int8 else None,
             EncodePath("openvino"), EncodePath("openvino", precision="bf16") if bf16 else None,
             EncodePath("openvino", "int8") if int8 and calibrated else None,
             EncodePath("openvino", "int8", "bf16") if int8 and calibrated and bf16 else None]
    return [p for p in paths if p is not None and p.backend in backends and p.backend in installed]


def host_key(features: set[str]) -> str:
    """The host as far as encoding speed goes: CPU model, features, threads and the runtimes' versions."""
    import torch

    versions = []
    for distribution in RUNTIMES.values():  # read from the installed metadata: no runtime is imported for it
        try:
            versions.append(f"{distribution}={importlib.metadata.version(distribution)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{distribution}=-")
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return "|".join([cpu, ",".join(sorted(features)), f"threads={torch.get_num_threads()}", *versions])


def model_key(folder: Path) -> str:
    """A model folder by its files' names, sizes and first and last MiB: a copy of it (a replica's fetch) is the
    same model, a new export is another."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(folder)}:{size}".encode())
        with path.open("rb") as handle:
            digest.update(handle.read(1 << 20))
            if size > 2 << 20:
                handle.seek(-(1 << 20), os.SEEK_END)
                digest.update(handle.read())
    return digest.hexdigest()[:16]


def default_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "lmplatform") / CACHE_FILE


def timing_texts(count: int, max_seq_length: int) -> list[str]:
    """`count` texts of at least `max_seq_length` tokens (truncated to it): the model's full shape."""
    return [" ".join(f"report{n} crashes when saving" for n in range(max_seq_length // 3 + 1))] * count


def time_encoding(encoder: "Encoder", texts: list[str], batch_size: int, rounds: int = 2) -> float:
    """Seconds per batch of the fastest of `rounds` encodes of `texts`, after one to warm up."""
    encoder.encode(texts, batch_size=batch_size)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        encoder.encode(texts, batch_size=batch_size)
        best = min(best, time.perf_counter() - start)
    return best / -(-len(texts) // batch_size)


def _read_cache(cache: Path) -> dict[str, dict[str, object]]:
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}


def choose_path(folder: Path, backends: Sequence[str] = tuple(RUNTIMES), int8: bool = True,
                calibration: Optional[Sequence[str]] = None, max_seq_length: Optional[int] = None,
                batch_size: int = 32, cache: Optional[Path] = None, timer: Timer = time_encoding,
                features: Optional[set[str]] = None) -> tuple[PathChoice, "Encoder"]:
    """The fastest candidate path for the model in `folder` on this host, and the encoder loaded on it.

    A cached choice for this host and model is taken as it is (if still a candidate); otherwise every candidate is
    timed with `timer` and the choice written to `cache` (default: $LMP_CACHE_DIR or ~/.cache/lmplatform)."""
    from lmplatform.models.encoder import Encoder

    features = cpu_features() if features is None else features
    paths = candidate_paths(features, installed_backends(), backends, int8, bool(calibration))
    if not paths:
        raise ValueError(f"encoder.backend 'auto' has no backend to choose from: of {', '.join(backends)}, "
                         f"installed: {', '.join(sorted(installed_backends() & set(backends))) or 'none'}")
    cache = cache or default_cache()
    host = host_key(features)
    key = f"{host}|{model_key(folder)}|{','.join(p.label for p in paths)}|batch={batch_size}|len={max_seq_length}"

    def load(path: EncodePath) -> Encoder:
        encoder = Encoder.from_pretrained(folder, max_seq_length=max_seq_length, backend=path.backend,  # type: ignore[arg-type]
                                          quantize=path.quantize, precision=path.precision,  # type: ignore[arg-type]
                                          calibration=calibration if path.quantize and path.backend == "openvino" else None)
        return encoder.eval()

    known = _read_cache(cache).get(key)
    if known is not None and EncodePath(**known["path"]) in paths:  # type: ignore[arg-type]
        path = EncodePath(**known["path"])  # type: ignore[arg-type]
        return PathChoice(path, host_class(features), cached=True), load(path)
    seconds: dict[str, float] = {}
    best: Optional[tuple[float, EncodePath, Encoder]] = None
    for path in paths:
        encoder = load(path)
        texts = timing_texts(TIMED_BATCHES * batch_size, encoder.max_seq_length)
        seconds[path.label] = timer(encoder, texts, batch_size)
        logger.info("encoder.backend auto: %s takes %.1f ms per batch of %d", path.label, seconds[path.label] * 1000,
                    batch_size)
        if best is None or seconds[path.label] < best[0]:
            best = (seconds[path.label], path, encoder)
        del encoder
        gc.collect()  # a runtime's compiled model and its threads go now, not while the winner encodes
    assert best is not None
    _, path, encoder = best
    record = _read_cache(cache)
    record[key] = {"path": asdict(path), "seconds": seconds, "at": time.strftime("%Y-%m-%d %H:%M")}
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = cache.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps(record, indent=1))
    staging.replace(cache)  # replicas on one host may write at once: each write is whole
    return PathChoice(path, host_class(features), seconds), encoder
