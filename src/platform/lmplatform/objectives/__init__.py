"""Training objectives, one folder each: `<name>/config.py` (the torch-free config), `<name>/objective.py`
(a torch module whose `forward(model, batch)` returns (loss, metrics), its evaluator and collate, and the
`prepare_data` / `build_recipe` wiring) and `<name>/__init__.py`, which declares the objective's `SPEC`.
`lmplatform.objectives.registry` lists the specs; the shared pieces (infonce, masking, ewc) sit here."""
