"""Serving the champion encoder with Ray Serve: search, classify, embed and similarity over HTTP.

Modules, one job each:
- `schemas`     request/response models and the configurable request limits
- `routes`      the public routes, declared once: the ingress, the metrics' labels and the fuzz derive from it
- `settings`    the application's settings (the builder's `args`), validated before anything starts
- `store`       the document store (ids, titles, texts, labels) that sits next to an index
- `release`     what a "release" is (a pinned model version + its index) and how a replica fetches it
- `deployments` the model deployments (retriever = encoder + index, re-ranker, classifier)
- `batch_isolation` a failing `@serve.batch` call is retried member by member: only the bad request fails
- `replicas`    ask every replica of a deployment, by its id, what it holds (the reload's check)
- `http_guard`  ASGI guard: body size counted as it arrives, bearer token, JSON whatever the Content-Type
- `http_errors` the `{error, field, details}` error body, rendered for any string
- `ingress`     the FastAPI ingress: the routes' handlers and JSON errors
- `app`         the application builder used by `serve run`, `serve deploy` and `lmp serve run`
- `control`     deploy, reload (hot, via user_config) and status of a running application
- `launch`      Serve config file + overrides -> validated plan -> running app (`lmp serve run`)
- `demo`        index a small corpus, serve it, query over HTTP, shut down (`lmp serve demo`)
"""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    "control": "lmplatform.serving.control",
    **dict.fromkeys(("SERVE_NAMESPACE", "ask_each", "running_replicas"), "lmplatform.serving.replicas"),
    "ServeLimits": "lmplatform.serving.schemas",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
