"""Evaluation metrics as pure functions of numbers, below every package that scores (retrieval's tie rule,
the objectives' validators, evaluation tasks, the champion gate): rankings and relevance sets (`retrieval`), similarity
scores against gold (`sts`), class probabilities against labels (`classification`) and a stage x task score
matrix (`continual`). numpy, scipy and scikit-learn only: no model, file or plot (those are the tasks')."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    "paired_bootstrap": "lmplatform.metrics.bootstrap",
    "retrieval_report": "lmplatform.metrics.retrieval",
    "spearman": "lmplatform.metrics.sts",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
