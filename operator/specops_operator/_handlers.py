"""kopf handlers: every trigger runs the same reconciliation of one SpeculativeService."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from specops.api import GROUP, PLURAL, VERSION, crd
from specops.errors import SpecopsError, SpecValidationError
from specops.render import RenderOptions
from specops_operator._cache import (
    MANAGED_BY,
    OWNED_SELECTOR,
    SERVICE_LABEL,
    OwnedPods,
    WatchCache,
)
from specops_operator._control import (
    ControlLoopOptions,
    control_tick,
    forget_decisions,
    to_thread_to_end,
)
from specops_operator._diffbase import HeldDiffBase, LeanDiffBase
from specops_operator._fetch import Observer, matching, pod_view, reading_client
from specops_operator._kube import (
    DISCOVERY_REFRESH_S,
    FIELD_MANAGER,
    KUBE_BURST,
    KUBE_QPS,
    Kube,
    KubeApiError,
    service_ref,
)
from specops_operator._leases import ShardKeeper
from specops_operator._metrics import (
    RECONCILE_SECONDS,
    RECONCILES,
    forget_service,
    start_service,
)
from specops_operator._owners import Writer, owned_status, status_apply
from specops_operator._reconcile import forget_turn, reconcile
from specops_operator._shards import ShardSettings, shard_of
from specops_operator._status import degraded_conditions

__all__ = ["RECHECK_SECONDS"]

RECHECK_SECONDS = 60.0
_SERVICE = (GROUP, VERSION, PLURAL)
_OWNED: Mapping[str, Any] = {
    MANAGED_BY: "specops",
    SERVICE_LABEL: kopf.PRESENT,
}
# The owned kinds watched (with the label selector) and so read from the watch cache.
_WATCHED = ("deployments", "services", "poddisruptionbudgets", "pods")
# Threads that render users' edits (service_edited); the connection pool holds theirs too.
_EDIT_THREADS = 2
# The threads of a ThreadPoolExecutor made without a size (kopf's, asyncio's default one).
_DEFAULT_THREADS = min(32, (os.cpu_count() or 1) + 4)


@kopf.on.startup()
def _configure(
    settings: kopf.OperatorSettings,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    settings.posting.level = logging.INFO
    for plural in _WATCHED:
        settings.watching.label_selectors[plural] = OWNED_SELECTOR
    # Pinned, so the connection pool below is sized to the threads that will really call.
    workers = settings.execution.max_workers or _DEFAULT_THREADS
    settings.execution.max_workers = workers
    shards: ShardSettings | None = getattr(memo, "shards", None)
    if getattr(memo, "kube", None) is None:
        memo.kube = Kube.from_environment(
            # kopf's executor (the reconciliations) and asyncio's, where the control loop's
            # API calls run (asyncio.to_thread), and the Lease rounds' thread
            connections=workers + _DEFAULT_THREADS + _EDIT_THREADS + 1,
            qps=getattr(memo, "kube_qps", KUBE_QPS),
            burst=getattr(memo, "kube_burst", KUBE_BURST),
            discovery_refresh_s=getattr(memo, "discovery_refresh_s", DISCOVERY_REFRESH_S),
            cache=WatchCache(),
            # which replica sent each request, in the API server's audit log
            user_agent=f"{FIELD_MANAGER}-operator/{shards.identity}" if shards else None,
        )
    memo.keeper = None if shards is None else ShardKeeper(memo.kube, shards)
    settings.persistence.diffbase_storage = (
        LeanDiffBase() if memo.keeper is None else HeldDiffBase(memo.keeper)
    )
    if getattr(memo, "pods", None) is None:
        memo.pods = OwnedPods()
    if getattr(memo, "options", None) is None:
        memo.options = RenderOptions()
    if getattr(memo, "control", None) is None:
        allowed = getattr(memo, "allowed_prometheus", ())
        memo.control = ControlLoopOptions(
            source=Observer(reading_client(), allowed_prometheus=allowed)
        )
    _own_crd(memo, logger)


def _own_crd(memo: kopf.Memo, logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """Bring the SpeculativeService CRD to this operator's schema (``--manage-crd``).

    Helm installs CRDs from a chart's ``crds/`` once and never upgrades them, so a field a
    newer release adds would be pruned by the old schema without a word. The operator
    applies the schema it was built with instead; without the right to, it says so and
    serves the CRD as it is.
    """
    if not getattr(memo, "manage_crd", False):
        return
    try:
        memo.kube.apply_crd(crd())
    except KubeApiError as exc:
        logger.warning("could not update the SpeculativeService CRD (serving it as it is): %s", exc)
        return
    logger.info("SpeculativeService CRD applied at this operator's schema")


@kopf.on.startup()  # after _configure: kopf runs the startup handlers in their order
async def _start_shards(
    memo: kopf.Memo, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
) -> None:
    keeper = _keeper(memo)
    if keeper is not None:
        keeper.start()
        logger.info(
            "sharded: %d shards, Leases %s-* in %s, this replica %s",
            keeper.settings.shards,
            keeper.settings.group,
            keeper.settings.namespace,
            keeper.settings.identity,
        )


def _keeper(memo: kopf.Memo) -> ShardKeeper | None:
    """The shards this replica holds; None unless sharded (or in a bare test harness)."""
    return getattr(memo, "keeper", None)


def _ours(body: kopf.Body, memo: kopf.Memo, **_: Any) -> bool:
    """Whether this replica acts on the service (always, unless sharded)."""
    keeper = _keeper(memo)
    return keeper is None or keeper.holds(body.metadata.uid or "")


@kopf.on.cleanup()
async def _close(memo: kopf.Memo, **_: Any) -> None:
    source = memo.control.source
    if isinstance(source, Observer):
        await source.client.aclose()
    keeper = _keeper(memo)
    if keeper is not None:
        try:  # the others take the shards now, not a Lease period later
            await asyncio.to_thread(keeper.stop)
        except SpecopsError as exc:
            logging.getLogger("specops.shards").warning("could not release the shards: %s", exc)


# The API server refused the object itself (invalid, forbidden, unprocessable), not a
# passing failure: retrying at once cannot help.
_REFUSED = frozenset({400, 403, 422})


def _report(memo: kopf.Memo, body: Mapping[str, Any], reason: str, message: str) -> None:
    """A Degraded condition and a Warning Event, once per distinct failure.

    Whether it was said already is read from the object as it is now: the handler's body
    can predate the status patch of the last failure (a create and a resume in a row),
    and reading it would post the same Warning twice.
    """
    meta = body.get("metadata") or {}
    with contextlib.suppress(KubeApiError):
        body = memo.kube.get_service(meta.get("namespace", "default"), meta["name"]) or body
    owned = owned_status(body.get("status") or {}, Writer.RECONCILER)
    current = owned.get("conditions") or []
    conditions = degraded_conditions(current, reason, message, datetime.now(UTC))
    if conditions is None:
        return
    # The reconciler's status as it is, Degraded replaced: an apply of less would remove the rest.
    status = status_apply(Writer.RECONCILER, {**owned, "conditions": conditions})
    with contextlib.suppress(KubeApiError):  # the report must not hide the failure itself
        memo.kube.apply_status(dict(body), status, Writer.RECONCILER)
    _post(body, "Warning", reason, message[:1024])


def _sync(body: Mapping[str, Any], memo: kopf.Memo, *, urgent: bool = False) -> None:
    """Reconcile one SpeculativeService; retry API failures, stop on an invalid spec.
    ``urgent``: a user's edit, whose requests skip the rate limit's queue.

    kopf hands each handler the newest version its watch has seen: the watch cache keeps
    it (unless the operator's own last write is newer), so the reconciliation reads it there.
    Sharded, a replica that does not hold the service leaves it alone; a service being
    deleted is left alone too."""
    _seen(memo, "MODIFIED", cast(kopf.Body, body))
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        # Being deleted: its children go with it (owner references). Writing them, or its
        # status, now would bring back what is going and race kopf's removal of its
        # finalizer.
        return
    keeper = _keeper(memo)
    uid = meta.get("uid", "")
    with keeper.acting(uid) if keeper is not None else contextlib.nullcontext(True) as ours:
        if ours:
            _reconciled(body, memo, urgent=urgent)


def _reconciled(body: Mapping[str, Any], memo: kopf.Memo, *, urgent: bool) -> None:
    started = time.monotonic()
    try:
        with memo.kube.urgent() if urgent else contextlib.nullcontext():
            reconcile(
                memo.kube,
                body,
                memo.options,
                lambda type_, reason, message: _post(body, type_, reason, message),
            )
    except SpecValidationError as exc:
        RECONCILES.labels("error").inc()
        _report(memo, body, "InvalidSpec", str(exc))
        raise kopf.PermanentError(str(exc)) from exc
    except KubeApiError as exc:
        RECONCILES.labels("error").inc()
        if exc.status in _REFUSED:  # the same write will be refused again: say so, retry slowly
            _report(memo, body, "ChildRefused", str(exc))
            raise kopf.TemporaryError(str(exc), delay=RECHECK_SECONDS) from exc
        raise kopf.TemporaryError(str(exc), delay=10) from exc
    RECONCILES.labels("ok").inc()
    RECONCILE_SECONDS.observe(time.monotonic() - started)


def _resync_delay(uid: str, **_: Any) -> float:
    """When a service's first resync comes: a minute, plus a share of another drawn from its
    uid, so a fleet created (or an operator restarted) at once resyncs spread over the
    minute instead of all in the same second."""
    return RECHECK_SECONDS * (1.0 + shard_of(uid, 1000) / 1000)


@kopf.on.resume(*_SERVICE, when=_ours)
@kopf.on.create(*_SERVICE, when=_ours)
@kopf.timer(*_SERVICE, interval=RECHECK_SECONDS, initial_delay=_resync_delay)
def service_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A service was made, the operator (re)started, or it is time to look again."""
    _sync(body, memo)


# A user's edit is rendered on threads of its own, so it never queues behind the resyncs
# and creations that fill kopf's executor (a burst of new services, a restart).
_EDITS = ThreadPoolExecutor(max_workers=_EDIT_THREADS, thread_name_prefix="specops-edit")


@kopf.on.update(*_SERVICE, when=_ours)
async def service_edited(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The spec changed: reconciled ahead of the rest (its own threads, its requests ahead
    of the rate limit's queue)."""
    sync = functools.partial(_sync, body, memo, urgent=True)
    # In the handler's context, as kopf runs its own sync handlers: kopf.event posts
    # through a queue that context holds.
    context = contextvars.copy_context()
    await asyncio.get_running_loop().run_in_executor(_EDITS, context.run, sync)


def _seen(memo: kopf.Memo, type_: str | None, body: kopf.Body) -> None:
    """A watch event into the operator's watch cache (none in a bare test harness)."""
    cache: WatchCache | None = getattr(memo.kube, "cache", None)
    if cache is None:
        return
    if type_ == "DELETED":
        cache.drop(body)
    else:
        cache.keep(body)


# The watch handlers that only keep what they saw are coroutines: kopf runs a sync handler on
# its executor, first in first out, and runs an object's watch handlers before its change
# handlers, so a sync one would hold a user's edit behind every creation and resync queued.
@kopf.on.event(*_SERVICE)
async def service_seen(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Every change of every service into memory: sharded, a replica that gains a service
    reads it there as it is now, not as it was when this replica last handled it."""
    _seen(memo, type, body)


@kopf.on.event("services", labels=_OWNED)
@kopf.on.event("poddisruptionbudgets", labels=_OWNED)
async def owned_child_seen(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """An owned Service or PDB changed: the resync reads it from memory."""
    _seen(memo, type, body)


@kopf.on.event("apps", "v1", "deployments", labels=_OWNED)
def owned_deployment_changed(
    type: str | None,
    body: kopf.Body,
    namespace: str | None,
    labels: Mapping[str, str],
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Someone (the operator, a user, the Deployment controller) touched an owned Deployment."""
    _seen(memo, type, body)
    keeper = _keeper(memo)
    owners = body.metadata.get("ownerReferences") or [{}]
    if keeper is not None and not keeper.holds(owners[0].get("uid", "")):
        return  # another replica's (its parent's uid is the owner reference's)
    parent = memo.kube.get_service(namespace or "default", labels[SERVICE_LABEL])
    if parent is not None:
        _sync(parent, memo)


@kopf.on.event("pods", labels=_OWNED)
async def owned_pod_seen(
    type: str | None,
    body: kopf.Body,
    namespace: str | None,
    name: str | None,
    labels: Mapping[str, str],
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """The pods of each service, by (namespace, service): what the control loop measures."""
    namespace, service = namespace or "default", labels[SERVICE_LABEL]
    if type == "DELETED":
        memo.pods.drop(namespace, service, name or "")
    else:
        memo.pods.keep(namespace, service, name or "", pod_view(body))


async def _take_over(memo: kopf.Memo, namespace: str, name: str) -> None:
    """Reconcile a service this replica has just gained; a failure is left to the resync."""
    body = memo.kube.get_service(namespace, name)  # from memory: service_seen keeps it fresh
    if body is None:
        return
    try:
        await to_thread_to_end(_sync, body, memo)
    except kopf.TemporaryError as exc:
        logging.getLogger("specops.shards").warning(
            "%s/%s: taking over failed, the resync retries: %s", namespace, name, exc
        )
    except kopf.PermanentError:
        pass  # an invalid spec: reported on the service already


def _post(body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(cast(kopf.Body, body), type=type_, reason=reason, message=message)


@kopf.daemon(*_SERVICE, cancellation_timeout=10)
async def control_loop(
    namespace: str | None,
    name: str | None,
    uid: str | None,
    memo: kopf.Memo,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    """The slow loop of one SpeculativeService: a decision every evaluation window (the pods
    it measures from :func:`owned_pod_seen`'s cache).

    Sharded, every replica runs it for every service, and only the holder ticks: a replica
    that gains the service reconciles it first (kopf's handlers ran on the old holder)."""
    owned: OwnedPods = memo.pods
    options: ControlLoopOptions = memo.control
    log = logging.getLogger("specops.control")
    namespace, name = namespace or "default", name or ""

    def pods(selector: Mapping[str, str]) -> list[Mapping[str, Any]]:
        return matching(owned.of(namespace, name), selector)

    keeper = _keeper(memo)
    # Unsharded, the service is this replica's from the start: nothing to take over.
    held = keeper is None
    # Another replica's: look again when Leases may have moved.
    look_again_s = keeper.settings.renew_s if keeper is not None else 0.0
    start_service(namespace, name)
    try:
        await stopped.wait(options.initial_delay_s)
        while not stopped:
            with keeper.acting(uid or "") if keeper else contextlib.nullcontext(True) as ours:
                gained, held = ours and not held, ours
                if not ours:
                    wait = look_again_s
                else:
                    if gained:
                        await _take_over(memo, namespace, name)
                    try:
                        wait = await control_tick(
                            memo.kube, namespace, name, options, memo.options, _post, pods
                        )
                    except SpecopsError as exc:
                        log.warning("%s/%s: control loop tick failed: %s", namespace, name, exc)
                        wait = options.retry_s
            await stopped.wait(max(wait, 0.05))
    finally:  # deleted, or no longer ours: keep neither its readings nor its series
        _seen(memo, "DELETED", cast(kopf.Body, service_ref(namespace, name)))
        options.source.forget(namespace, name)
        forget_service(namespace, name)
        forget_turn(namespace, name)
        forget_decisions(namespace, name)
