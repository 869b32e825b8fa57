"""Masked-language-model continued pretraining."""
from lmplatform.objectives.mlm.config import MLMObjectiveConfig
from lmplatform.objectives.spec import ModelCardText, ObjectiveSpec

SPEC = ObjectiveSpec(
    name="mlm",
    config=MLMObjectiveConfig,
    validation_metrics=("mlm_loss", "mlm_accuracy", "perplexity", "pseudo_perplexity"),
    evaluation_keys=("objective.mask_probability", "objective.replace_with_mask", "objective.replace_with_random",
                     "objective.whole_word", "objective.pseudo_perplexity_sentences"),
    implementation="lmplatform.objectives.mlm.objective",
    card=ModelCardText(
        "A domain-adapted encoder: the starting point for a sentence-embedding, re-ranking or classification stage on "
        "this domain's texts.",
        "Not trained to make sentence vectors comparable: its pooled vectors are not a tuned similarity."),
)
