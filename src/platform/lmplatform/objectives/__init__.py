"""Training objectives. Each is a torch module whose `forward(model, batch)` returns
(loss, metrics); `lmplatform.objectives.registry` maps config names to recipes."""
