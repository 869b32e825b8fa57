"""Bi-encoder distillation: a cross-encoder teacher's scores on (query, positive, hard negatives), learnt by MarginMSE or listwise KL."""  # noqa: E501 - the model card shows this first line whole
from lmplatform.objectives.biencoder_distill.config import BiencoderDistillObjectiveConfig
from lmplatform.objectives.spec import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="biencoder_distill",
    config=BiencoderDistillObjectiveConfig,
    validation_metrics=("distill_loss", "margin_agreement", "ranking_loss", "inbatch_accuracy", "inbatch_mrr",
                        "inbatch_candidates"),
    evaluation_keys=("objective.loss", "objective.teacher", "objective.student_temperature", "objective.kl_temperature",
                     "objective.max_hard_negatives", "objective.teacher_max_seq_length", "optim.batch_size"),
    implementation="lmplatform.objectives.biencoder_distill.objective",
    model_references=("teacher",),
    retrieval_validated=True,
    pair_data=True,
    data_fields=(("hard_negative_field", "the column of each pair's hard negatives the teacher scores (a mine stage "
                                         "writes it as `hard_negatives`)"),),
)
