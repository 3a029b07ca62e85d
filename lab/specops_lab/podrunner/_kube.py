"""The API server as a :class:`PodSource`: the labelled pods and the fake nodes, as JSON,
and the engine-ready annotation written back."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from specops_lab.cluster import ENGINE_READY_ANNOTATION, KWOK_NODE_ANNOTATION
from specops_lab.podrunner._errors import PodRunnerError
from specops_lab.podrunner._pods import SERVICE_LABEL, PodKey

__all__ = ["KubePodSource"]

_REQUEST_TIMEOUT_S = 10.0


class KubePodSource:
    """Lists pods with the ``specops.io/service`` label and the kwok-managed nodes."""

    def __init__(self, kubeconfig: Path | None) -> None:
        try:
            self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else None
            )
        except (config.ConfigException, OSError) as exc:
            raise PodRunnerError(f"cannot load the kubeconfig: {exc}") from exc
        self._core = client.CoreV1Api(self._api)

    def _items(self, what: str, call: Callable[..., Any], **kwargs: Any) -> list[dict[str, Any]]:
        try:
            response = call(_preload_content=False, _request_timeout=_REQUEST_TIMEOUT_S, **kwargs)
            items: list[dict[str, Any]] = json.loads(response.data)["items"]
        except (ApiException, HTTPError, OSError, ValueError, KeyError) as exc:
            raise PodRunnerError(f"cannot list {what}: {exc}") from exc
        return items

    def pods(self) -> Sequence[Mapping[str, Any]]:
        return self._items(
            "pods", self._core.list_pod_for_all_namespaces, label_selector=SERVICE_LABEL
        )

    def nodes(self) -> frozenset[str]:
        key, value = KWOK_NODE_ANNOTATION
        nodes = self._items("nodes", self._core.list_node)
        return frozenset(
            n["metadata"]["name"]
            for n in nodes
            if n["metadata"].get("annotations", {}).get(key) == value
        )

    def mark_engine_ready(self, key: PodKey, ready: bool) -> None:
        # The uid in the patch makes the API server refuse it for a namesake pod.
        body = {
            "metadata": {
                "uid": key.uid,
                "annotations": {ENGINE_READY_ANNOTATION: "true" if ready else "false"},
            }
        }
        try:
            self._core.patch_namespaced_pod(
                key.name,
                key.namespace,
                body,
                _content_type="application/merge-patch+json",
                _request_timeout=_REQUEST_TIMEOUT_S,
            )
        except (ApiException, HTTPError, OSError) as exc:
            raise PodRunnerError(f"cannot annotate pod {key}: {exc}") from exc

    def release_pod(self, key: PodKey) -> None:
        # What the kubelet does once a pod's containers have stopped: the final delete. The
        # uid precondition keeps it from deleting a namesake pod.
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=key.uid)
        )
        try:
            self._core.delete_namespaced_pod(
                key.name, key.namespace, body=body, _request_timeout=_REQUEST_TIMEOUT_S
            )
        except ApiException as exc:
            if exc.status in (404, 409):  # gone already, or a namesake: nothing of ours left
                return
            raise PodRunnerError(f"cannot delete pod {key}: {exc}") from exc
        except (HTTPError, OSError) as exc:
            raise PodRunnerError(f"cannot delete pod {key}: {exc}") from exc

    def close(self) -> None:
        self._api.close()
