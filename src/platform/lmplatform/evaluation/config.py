"""`EvaluationConfig`: what to evaluate, on which data, with which models (its own YAML, `configs/eval/`).

An evaluation config holds one or more tasks, each selected by its `task`
discriminator: `retrieval`, `sts` and `classification`. A new task adds its config
class to `TaskConfig` below and a runner to `lmplatform.evaluation.runner.TASK_RUNNERS`;
nothing else changes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Optional, Union

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.loader import apply_overrides, parse_config, read_yaml
from lmplatform.retrieval.settings import FusionSettings


def _unique_names(what: str, items: list[Any]) -> None:
    names = [i.name for i in items]
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names must be unique, got {names}")


class RetrievalDataset(Section):
    """Where reports and duplicate relations are, and how to read them.

    `format: pairs` — one row per (query report, target report), e.g. OpenOffice
    `pairs.jsonl` (duplicate_id → master_id) or the demo `duplicates.jsonl`.
    `format: links` — undirected duplicate links (Hadoop, SeaMonkey): the end whose
    resolution says duplicate is the query; if neither or both do, both ends are queries.
    """

    name: str = Field(..., min_length=1, description="Label in reports.")
    format: Literal["pairs", "links"] = "pairs"
    corpus: str = Field(..., description="JSONL of reports (one object per line).")
    relations: str = Field(..., description="JSONL of duplicate pairs or links.")
    id_field: str = "id"
    query_id_field: str = Field("duplicate_id", description="pairs: the duplicate's id; links: the first end (id_a).")
    target_id_field: str = Field("master_id", description="pairs: the primary's id; links: the second end (id_b).")
    resolution_fields: Optional[tuple[str, str]] = Field(
        None, description="links: the resolution field of each end, e.g. [resolution_a, resolution_b]."
    )
    split_field: Optional[str] = Field("split", description="Field of the relation rows naming the split; null: no split.")
    split: Optional[str] = Field("test", description="Keep relations of this split; null: all.")
    query_text_source: Literal["corpus", "relations"] = Field(
        "corpus", description="corpus: query texts come from the query's report; relations: from the relation row "
        "(the demo's duplicates.jsonl holds query_title/query_text)."
    )
    relevance: Literal["target", "group"] = Field(
        "group", description="target: only the related report is relevant; group: every other report in the same "
        "duplicate group (connected component of all relations, all splits) is relevant."
    )
    limit_queries: Optional[int] = Field(None, ge=1, description="Evaluate only the first N queries (smoke runs).")


class RetrievalScenario(Section):
    """Which fields form the query text and which form the documents searched."""

    name: str = Field(..., min_length=1)
    query_fields: list[str] = Field(["title", "description"], min_length=1, description="Joined with '. '.")
    corpus_fields: list[str] = Field(["title", "description"], min_length=1)
    corpus_scope: Literal["all", "targets"] = Field(
        "all", description="all: every report (minus the query itself); targets: only reports that are a target "
        "of some relation, i.e. the primaries."
    )
    exclude_query: bool = Field(True, description="Remove the query's own report from its results.")


class RetrieverSpec(Section):
    name: str = Field(..., min_length=1, description="Label in reports and metric names.")
    kind: Literal["dense", "bm25", "hybrid", "two_stage"]
    model: Optional[str] = Field(
        None, description="dense / hybrid / two_stage first stage: 'default', a folder, or models:/name@alias.")
    quantize: Optional[Literal["int8"]] = None
    index: Literal["flat", "hnsw", "ivf", "ivfpq", "auto"] = "flat"
    first_stage: Literal["dense", "bm25", "hybrid"] = "dense"
    hybrid: FusionSettings = Field(default_factory=FusionSettings, description="hybrid (and two_stage over it): how BM25 "
                                   "and the model are fused (retrieval.fusion).")
    bm25_weights: Optional[list[float]] = Field(None, min_length=1, description="hybrid: one row per weight, named "
                                                "<name>-w<weight>, in place of hybrid.bm25_weight (the corpus is indexed once).")
    reranker: Optional[str] = Field(None, description="two_stage: a cross-encoder / sequence-classification folder.")
    candidates: int = Field(20, ge=1, description="two_stage: first-stage candidates re-ranked.")
    rerank_weight: float = Field(1.0, ge=0.0, le=1.0, description="two_stage: v in (1-v)·minmax(first stage) + "
                                 "v·minmax(re-ranker) over the re-ranked candidates; 1: the re-ranker's order.")
    batch_size: int = Field(64, ge=1)
    max_seq_length: Optional[int] = Field(None, ge=8)

    @model_validator(mode="after")
    def _needs(self) -> "RetrieverSpec":
        if self.kind in ("dense", "hybrid") and not self.model:
            raise ValueError(f"retriever {self.name!r}: kind={self.kind} needs model")
        if self.kind == "two_stage":
            if not self.reranker:
                raise ValueError(f"retriever {self.name!r}: kind=two_stage needs reranker")
            if self.first_stage != "bm25" and not self.model:
                raise ValueError(f"retriever {self.name!r}: two_stage with first_stage={self.first_stage} needs model")
        if self.bm25_weights is not None:
            if "hybrid" not in (self.kind, self.first_stage if self.kind == "two_stage" else None):
                raise ValueError(f"retriever {self.name!r}: bm25_weights applies to a hybrid first stage only")
            if any(not 0.0 <= w <= 1.0 for w in self.bm25_weights) or len(set(self.bm25_weights)) != len(self.bm25_weights):
                raise ValueError(f"retriever {self.name!r}: bm25_weights must be distinct values in [0, 1], "
                                 f"got {self.bm25_weights}")
        return self

    def variants(self) -> list[tuple[str, FusionSettings]]:
        """(row name, fusion settings) of each row this retriever makes: one per bm25_weights entry, else one."""
        if self.bm25_weights is None:
            return [(self.name, self.hybrid)]
        return [(f"{self.name}-w{w:g}", self.hybrid.model_copy(update={"bm25_weight": w})) for w in self.bm25_weights]


class RetrievalTask(Section):
    task: Literal["retrieval"] = "retrieval"
    datasets: list[RetrievalDataset] = Field(..., min_length=1)
    scenarios: list[RetrievalScenario] = Field(default_factory=lambda: [RetrievalScenario(name="observation_to_observation")])
    retrievers: list[RetrieverSpec] = Field(..., min_length=1)
    ks: list[int] = Field([1, 3, 5, 10, 15, 20], min_length=1)
    mrr_ks: list[int] = Field([5, 15], min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "RetrievalTask":
        for what, items in (("retriever", self.retrievers), ("scenario", self.scenarios), ("dataset", self.datasets)):
            _unique_names(what, items)
        rows = [name for spec in self.retrievers for name, _ in spec.variants()]
        if len(set(rows)) != len(rows):
            raise ValueError(f"retriever rows (a bm25_weights list makes <name>-w<weight>) must be unique, got {rows}")
        if min(self.ks + self.mrr_ks) <= 0:
            raise ValueError(f"ks and mrr_ks must be positive, got {self.ks} / {self.mrr_ks}")
        return self


class EncoderSpec(Section):
    """An encoder to evaluate (sts, classification)."""

    name: str = Field(..., min_length=1, description="Label in reports and metric names.")
    model: str = Field(..., min_length=1, description="'default', a folder, or models:/name@alias.")
    quantize: Optional[Literal["int8"]] = None
    batch_size: int = Field(32, ge=1)
    max_seq_length: Optional[int] = Field(None, ge=8)


class StsDataset(Section):
    """JSONL sentence pairs with a gold similarity score."""

    name: str = Field(..., min_length=1, description="Label in reports.")
    path: str = Field(..., description="JSONL of scored pairs.")
    sentence1_field: str = "sentence1"
    sentence2_field: str = "sentence2"
    score_field: str = "score"
    scale: Optional[tuple[float, float]] = Field(
        None, description="Gold scale [low, high] (EDRM needs it); null: the min and max of the gold scores read."
    )
    where: Optional[dict[str, Any]] = Field(
        None, description="Keep rows whose fields equal these values (a list value: any of them), e.g. {split: test}."
    )
    fit_path: Optional[str] = Field(
        None, description="Labelled pairs (usually the train split) to fit an isotonic cosine->scale map; adds "
        "edrm_isotonic. Same fields and scale as path."
    )
    fit_where: Optional[dict[str, Any]] = Field(None, description="Row filter for fit_path, like where.")
    limit: Optional[int] = Field(None, ge=2, description="Read only the first N pairs of each file (smoke runs).")

    @model_validator(mode="after")
    def _scale(self) -> "StsDataset":
        if self.scale is not None and not self.scale[1] > self.scale[0]:
            raise ValueError(f"dataset {self.name!r}: scale must be [low, high] with high > low, got {list(self.scale)}")
        return self


class StsTask(Section):
    task: Literal["sts"]
    datasets: list[StsDataset] = Field(..., min_length=1)
    encoders: list[EncoderSpec] = Field(..., min_length=1)
    cosine_range: tuple[float, float] = Field(
        (0.0, 1.0), description="Cosine range mapped linearly onto the gold scale for EDRM (clipped)."
    )

    @model_validator(mode="after")
    def _unique(self) -> "StsTask":
        _unique_names("dataset", self.datasets)
        _unique_names("encoder", self.encoders)
        return self


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
        _unique_names("dataset", self.datasets)
        _unique_names("encoder", self.encoders)
        return self


TaskConfig = Annotated[Union[RetrievalTask, StsTask, ClassificationTask], Field(discriminator="task")]


class EvaluationTrackingConfig(Section):
    tracking_uri: Optional[str] = Field(None, description="Default: $MLFLOW_TRACKING_URI, else sqlite under <project>/mlruns.")
    experiment: str = Field("lmplatform-eval", min_length=1)
    run_id: Optional[str] = Field(
        None, description="Log into this existing MLflow run (the run of the model evaluated). Default: the run of "
        "the first models:/ model evaluated, else a new run."
    )
    run_name: Optional[str] = None
    enabled: bool = True


class EvaluationConfig(Section):
    name: str = Field("evaluation", min_length=1)
    output_dir: str = Field("runs/eval", description="Report folder: report.json, report.md, PNGs.")
    tasks: list[TaskConfig] = Field(..., min_length=1)
    tracking: EvaluationTrackingConfig = Field(default_factory=EvaluationTrackingConfig)

    @model_validator(mode="after")
    def _one_task_per_kind(self) -> "EvaluationConfig":
        # Reports and metric names are keyed by task kind: a second task of a kind would overwrite the first.
        kinds = [t.task for t in self.tasks]
        repeated = sorted({k for k in kinds if kinds.count(k) > 1})
        if repeated:
            raise ValueError(f"tasks: more than one {repeated[0]!r} task; list all its datasets (and encoders or "
                             f"retrievers) in one task instead")
        return self


def load_evaluation_config(path: str | Path | None, overrides: Iterable[str] = (),
                           base: Optional[dict[str, Any]] = None) -> EvaluationConfig:
    """Read the YAML (or `base`), apply `--set a.b=c` overrides, validate; raises ConfigError naming the field."""
    import copy

    data = read_yaml(path) if path is not None else copy.deepcopy(base or {})
    data = apply_overrides(data, overrides)
    return parse_config(data, EvaluationConfig, source=str(path) if path else "overrides")
