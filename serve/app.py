"""Entry point for Ray's `serve` CLI.

    serve run serve/config.yaml                                # the config's args
    serve run serve.app:app model=models:/lmplatform-biencoder@champion index=runs/index/demo/index

`lmp serve run` does the same and also reads $LMP_SERVE_TOKEN, validates before
starting and can watch the alias (see docs/serving.md).
"""
from lmplatform.serving.app import build_app

app = build_app

__all__ = ["app", "build_app"]
