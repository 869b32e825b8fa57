"""`ExportFormatSpec`: what one export format is, in one place, as `StageSpec` is for pipeline stages.

A format writes a model folder (a bi-encoder's, a cross-encoder's, or a classifier's encoder) into a new folder that
a tool outside lmplatform loads. The registry is `models/export.py`: a new format is its module under
`models/exports/` (a spec) plus one line there, or `register_export_format(SPEC)` from a user's module.

Light on purpose: a run config validates `tracking.exports` against the registry, so a format's module imports its
backend (torch, ONNX, OpenVINO) inside `write`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from lmplatform.models.kind import CLASSIFIER, CROSS_ENCODER, ENCODER, ModelKind

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder


class ExportError(ValueError):
    """The model cannot be exported in the requested format (the message says why)."""


@dataclass(frozen=True)
class ExportOptions:
    """What `export_model` passes every format; each reads what applies to it.

    keep_fp32: layers an int8 format keeps in higher precision (None: the format's own default);
    cross_encoder_max_length: the truncation length a cross-encoder is exported with;
    calibration: texts of the served domain, for a format that `needs_calibration`.
    """

    keep_fp32: Optional[Sequence[str]] = None
    cross_encoder_max_length: int = 256
    calibration: Optional[Sequence[str]] = None


@dataclass
class ExportResult:
    format: str
    kind: ModelKind
    folder: Path
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        note = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{self.kind} exported as {self.format} to {self.folder}: {len(self.files)} files{note}"


# write(source, kind, out, options): the model folder `source` of `kind` written into the new folder `out`
Writer = Callable[[Path, ModelKind, Path, ExportOptions], ExportResult]


@dataclass(frozen=True)
class ExportFormatSpec:
    """One export format.

    - `name`: what `lmp export --format`, `tracking.exports` and `export_model` call it; a format defined outside the
      package may instead be named by its import path, `package.module:ATTRIBUTE` (lmplatform/registry.py).
    - `write`: the export (`Writer`); it returns what it wrote, with notes on how (pooling, precision).
    - `kinds`: the model kinds it writes. A classifier exports its encoder (its head is no format's), so a format
      for encoders takes classifiers too.
    - `needs_calibration`: it needs texts of the served domain (static int8); a training run's `tracking.exports`
      cannot name it.
    - `how_to_load`: the line `lmp export` prints after writing: how a user loads the folder.
    """

    name: str
    description: str
    write: Writer
    how_to_load: Callable[[ExportResult], str]
    kinds: tuple[ModelKind, ...] = (ENCODER,)
    needs_calibration: bool = False

    @property
    def artifact(self) -> str:
        """Where a run's MLflow artifacts hold this export, beside `model/`."""
        return f"model-{self.name.replace(':', '-')}"

    def accepts(self, kind: ModelKind) -> bool:
        return kind in self.kinds or (kind == CLASSIFIER and ENCODER in self.kinds)

    def refusal(self, kind: ModelKind, others: Sequence["ExportFormatSpec"]) -> Optional[str]:
        """Why a model of `kind` cannot be written in this format, naming the formats that take it; None if it can."""
        if self.accepts(kind):
            return None
        takers = [spec.name for spec in others if spec.accepts(kind)]
        what = "a cross-encoder" if kind == CROSS_ENCODER else f"a {kind}"
        return (f"{self.name} exports {' and '.join(f'{k}s' for k in self.kinds)}; this is {what}: export it as "
                f"{' or '.join(takers) or 'no registered format'}")


def folder_files(folder: Path) -> list[str]:
    """The files under `folder`, relative to it, sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def load_encoder(source: Path) -> "Encoder":
    from lmplatform.models.encoder import Encoder

    return Encoder.from_pretrained(source)
