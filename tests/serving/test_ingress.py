"""The ingress before its model deployments first answer (their first load takes minutes at 10^6 documents): /healthz
is a 503 'starting' and every call a 503 with Retry-After, each within `model_probe_s`; once they have answered, the
ingress never asks again. The ingress class runs here without Serve, over handles that answer when told to."""
from __future__ import annotations

import asyncio
import json
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest

from lmplatform.serving.ingress import ServeIngress, _Refused
from lmplatform.serving.release import Release


class Response:
    """As Serve's DeploymentResponse: awaited for the answer, or cancelled."""

    def __init__(self, answer: Any, cancelled: list[Any]):
        self.answer, self.cancelled = answer, cancelled

    def __await__(self) -> Any:
        return self.answer.__await__()

    def cancel(self) -> None:
        self.answer.close()
        self.cancelled.append(self)


class Handle:
    """A deployment handle whose every method answers only once `loaded` is set; counts the calls made and keeps
    those cancelled."""

    def __init__(self, loaded: asyncio.Event):
        self.loaded, self.calls, self.cancelled = loaded, 0, []

    def __getattr__(self, method: str) -> Any:
        return SimpleNamespace(remote=partial(self._remote, method))

    def _remote(self, method: str, *args: Any) -> Response:
        self.calls += 1

        async def answer() -> Any:
            await self.loaded.wait()
            return {"method": method, "args": args}

        return Response(answer(), self.cancelled)


def bare_ingress(retriever: Handle, classifier: Handle) -> Any:
    """The ServeIngress class under Serve's ASGI wrapper, made without Serve."""
    cls = ServeIngress.func_or_class.__mro__[1]
    ingress = cls.__new__(cls)
    cls.__init__(ingress, retriever, classifier, model_probe_s=0.05)
    ingress.active = Release(id="model/1", model_uri="/m", index_uri="/i")
    return ingress


def test_before_the_models_first_answer_health_and_calls_are_a_quick_503() -> None:
    async def scenario() -> None:
        loaded = asyncio.Event()
        retriever, classifier = Handle(loaded), Handle(loaded)
        ingress = bare_ingress(retriever, classifier)

        health = await ingress.healthz()
        assert health.status_code == 503 and json.loads(health.body) == {"status": "starting"}
        assert health.headers["Retry-After"] == "1"
        search = retriever.search.remote("model/1", ["printer jams"])
        with pytest.raises(_Refused, match="still loading") as refused:
            await ingress._call(search)
        assert refused.value.status == 503 and retriever.cancelled == [search]  # not left queued for the replica

        loaded.set()
        assert (await ingress.healthz()).status == "ok"
        asked = retriever.calls
        assert await ingress._call(retriever.search.remote("model/1", ["printer jams"])) == {
            "method": "search", "args": ("model/1", ["printer jams"])}
        assert retriever.calls == asked + 1  # answered once: no probe before later calls

    asyncio.run(scenario())
