"""The classification evaluation's config: labelled datasets, the encoders, the frozen head, and the optional
fine-tuned rows and few-shot curve."""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.evaluation.tasks.common import EncoderSpec, unique_names


class ClassificationDataset(Section):
    """JSONL rows with text and a label; splits from a split field of one file, or one file per split."""

    name: str = Field(..., min_length=1, description="Label in reports.")
    path: Optional[str] = Field(None, description="One JSONL with a split field (train / dev / test values below).")
    split_field: str = "split"
    train_split: str = "train"
    dev_split: Optional[str] = Field("dev", description="null: no dev split (the last epoch is kept).")
    test_split: str = "test"
    train: Optional[str] = Field(None, description="Instead of path: the training JSONL.")
    dev: Optional[str] = Field(None, description="Instead of path: the dev JSONL (optional).")
    test: Optional[str] = Field(None, description="Instead of path: the test JSONL.")
    text_fields: list[str] = Field(["text"], min_length=1, description="Joined with '. '.")
    label_field: str = "label"
    min_class_size: int = Field(
        1, ge=1, description="Classes with fewer examples in the train split are merged into 'Other' (counted on "
        "train only, so held-out labels never decide which classes exist)."
    )
    limit: Optional[int] = Field(None, ge=2, description="Keep only the first N examples of each split (smoke runs).")

    @model_validator(mode="after")
    def _files(self) -> "ClassificationDataset":
        split_files = [f for f in ("train", "dev", "test") if getattr(self, f)]
        if self.path and split_files:
            raise ValueError(f"dataset {self.name!r}: give either path (with a split field) or train/dev/test files, "
                             f"not both (got path and {split_files})")
        if not self.path and not (self.train and self.test):
            raise ValueError(f"dataset {self.name!r}: needs path (with a split field) or both train and test files")
        return self


class ClassifierHeadConfig(Section):
    """The MLP head trained on the frozen encoder's cached embeddings (best dev-accuracy epoch kept)."""

    hidden: int = Field(256, ge=1)
    depth: int = Field(2, ge=1)
    epochs: int = Field(30, ge=1)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(32, ge=1)
    class_balance: Literal["none", "weighted_loss"] = "weighted_loss"
    seed: int = 13


class FinetuneConfig(Section):
    """Encoder and head trained together: the `classifier` objective with freeze_encoder=false, in this process.

    The head has the frozen rows' architecture (`head.hidden`, `head.depth`, `head.class_balance`). The run
    trains for a fixed budget and keeps its last step: no epoch is chosen on any split.
    """

    epochs: float = Field(3.0, gt=0, description="Passes over the training split (or the few-shot sample).")
    min_steps: int = Field(
        30, ge=1, description="Every run takes at least this many optimizer steps: 8 examples per class are one or "
        "two batches an epoch, too few steps to move a transformer.",
    )
    lr: float = Field(2e-5, gt=0, le=1)
    head_lr: Optional[float] = Field(
        None, gt=0, le=1, description="Learning rate of the head (the classifier objective's head_lr; default lr, "
        "shared with the encoder).")
    batch_size: int = Field(16, ge=1)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    head_dropout: float = Field(0.1, ge=0, lt=1)
    seed: int = 13
    max_seq_length: int = Field(128, ge=8, description="Tokens per text while fine-tuning.")
    precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32", description="Autocast type of the fine-tuning passes, as a run's optim.precision ('auto': bf16 where "
        "the CPU or GPU has it in hardware).")


class FewShotConfig(Section):
    """Learning curve: each classifier trained on `shots` examples per class (all of a smaller class), per seed."""

    shots: list[Union[int, Literal["all"]]] = Field([8, 16, 32, "all"], min_length=1,
                                                    description="Examples per class; 'all': the whole training split.")
    seeds: list[int] = Field([13, 14, 15], min_length=1, description="One sample (and training seed) each.")

    @model_validator(mode="after")
    def _shots(self) -> "FewShotConfig":
        counts = [s for s in self.shots if s != "all"]
        if any(s < 1 for s in counts):
            raise ValueError(f"shots must be positive or 'all', got {self.shots}")
        if len(set(map(str, self.shots))) != len(self.shots) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"shots and seeds must not repeat, got shots {self.shots}, seeds {self.seeds}")
        return self


class ClassificationTask(Section):
    task: Literal["classification"]
    datasets: list[ClassificationDataset] = Field(..., min_length=1)
    encoders: list[EncoderSpec] = Field(..., min_length=1)
    head: ClassifierHeadConfig = Field(default_factory=ClassifierHeadConfig)
    knn_k: Optional[int] = Field(5, ge=1, description="KNN baseline on normalised embeddings; null: no KNN.")
    finetune: Optional[FinetuneConfig] = Field(
        None, description="Also fine-tune encoder + head and report it beside the frozen rows; null: frozen rows only.")
    few_shot: Optional[FewShotConfig] = Field(
        None, description="Few-shot curve of every classifier of the task (MLP, KNN, fine-tuned when set), mean ± std "
        "over seeds, as a table and a PNG; null: none.")

    @model_validator(mode="after")
    def _unique(self) -> "ClassificationTask":
        unique_names("dataset", self.datasets)
        unique_names("encoder", self.encoders)
        return self
