"""Evaluation metrics as pure functions of numbers, below every package that scores (retrieval's tie rule,
the objectives' validators, evaluation tasks, the champion gate): rankings and relevance sets (`retrieval`), similarity
scores against gold (`sts`), class probabilities against labels (`classification`) and a stage x task score
matrix (`continual`). numpy, scipy and scikit-learn only: no model, file or plot (those are the tasks')."""
