"""The kopf handlers of Topic and Subscription resources, registered on a kopf registry by
`register`. Create, update and resume reconcile; a timer (every `resync_interval`) reconciles
again, which reverts drift made through the admin API, and refreshes the status from the stats;
delete removes the object from Herald (or keeps it, per deletionPolicy) while the operator's
finalizer holds the resource.

Failures: the admin API unreachable (a retryable HeraldError) is a kopf TemporaryError retried
after `retry_delay`, the status saying why; a refusal by Herald or a spec Herald cannot take is
a PermanentError (the timer still tries again: the cause may be gone). Every handler is idempotent:
a pass with nothing to change writes nothing to Herald.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf
from herald.client import AuthenticationToken
from herald.client.admin import AdminClient
from herald.common.errors import HeraldError

from herald_operator import ownership, reconcile, status
from herald_operator.desired import (
    DesiredSubscription,
    DesiredTopic,
    SpecError,
    check_unchanged,
    desired_subscription,
    desired_topic,
    topic_name,
)
from herald_operator.observability import OperatorMetrics
from herald_operator.settings import OperatorSettings

GROUP, VERSION = "herald.io", "v1alpha1"
TOPICS, SUBSCRIPTIONS = "topics", "subscriptions"
FINALIZER = "herald.io/finalizer"
TOPIC_INDEX = "herald_topic_names"  # (namespace, Topic resource name) -> full topic name
TOPIC_CLAIMS = "herald_topic_claims"  # full topic name -> the Topic resources naming it
SUBSCRIPTION_CLAIMS = "herald_subscription_claims"  # subscription name -> (claim, full topic or "", Topic ref)
# Reconciliation of a resource carrying it with the value "true" is paused (docs/operator.md).
PAUSED_ANNOTATION = "herald.io/paused"
# The spec fields naming a Topic's Herald topic: they cannot change (the CRD's CEL rules say so too).
TOPIC_IDENTITY = "spec.tenant, spec.namespace, spec.name and spec.persistent"

SubscriptionClaim = tuple[ownership.Claim, str, str]

Patch = Any  # kopf.Patch: a dict with a status view


class HeraldOperator:
    """The handlers' shared state: settings and one admin client (made on first use, closed at
    cleanup)."""

    def __init__(self, settings: OperatorSettings, metrics: OperatorMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else OperatorMetrics()
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            settings = self.settings
            self._admin = AdminClient(
                settings.admin_url, timeout=settings.admin_timeout,
                auth=AuthenticationToken.from_file(settings.auth_token_file) if settings.auth_token_file else None,
                tls_trust_certs_file_path=settings.tls_trust_certs_file or None,
                tls_certificate_file_path=settings.tls_cert_file or None,
                tls_private_key_file_path=settings.tls_key_file or None)
        return self._admin

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()

    # ---- status and errors ----

    def _write_status(
        self, body: kopf.Body, previous: Mapping[str, Any], patch: Patch, updates: Sequence[Mapping[str, str]],
        *, always_warn: bool = False, **fields: Any,
    ) -> None:
        generation = body.get("metadata", {}).get("generation")
        patch.setdefault("status", {}).update(status.status_patch(previous, updates, generation, **fields))
        went = status.synced_transition(previous, updates)
        synced = next((u for u in updates if u["type"] == status.SYNCED), None)
        if went is None and always_warn and synced is not None and synced["status"] == "False":
            went = synced
        if went is not None:
            kopf.event(body, type="Warning", reason=went["reason"], message=went["message"])

    def _fail(
        self, body: kopf.Body, previous: Mapping[str, Any], patch: Patch, error: Exception, doing: str,
    ) -> kopf.TemporaryError | kopf.PermanentError:
        """Write the status an error means and return the kopf error to raise."""
        if isinstance(error, SpecError):
            self._write_status(body, previous, patch, status.failed_conditions(status.INVALID_SPEC, str(error)))
            return kopf.PermanentError(f"{doing}: {error}")
        if isinstance(error, HeraldError) and not error.retryable:
            self._write_status(body, previous, patch, status.failed_conditions(status.HERALD_REFUSED, str(error)))
            return kopf.PermanentError(f"{doing}: Herald refused: {error}")
        message = f"admin API at {self.settings.admin_url} did not answer while {doing}: {error}"
        self._write_status(body, previous, patch, status.failed_conditions(status.ADMIN_UNAVAILABLE, message))
        return kopf.TemporaryError(message, delay=self.settings.retry_delay)

    def _paused(self, body: kopf.Body, previous: Mapping[str, Any], patch: Patch, what: str) -> None:
        self._write_status(body, previous, patch, status.paused_conditions(
            f"annotation {PAUSED_ANNOTATION} is \"true\": {what} is not reconciled (nothing in Herald is changed, "
            "and deleting the resource leaves Herald alone); remove the annotation to resume"))

    def _conflict(
        self, body: kopf.Body, previous: Mapping[str, Any], patch: Patch, what: str, first: ownership.Claim,
        logger: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        message = ownership.conflict_message(what, first)
        old = status.find_condition(previous, status.READY)
        if old is None or old.get("reason") != status.RESOURCE_CONFLICT:
            logger.warning("%s", message)
        self._write_status(body, previous, patch, status.conflict_conditions(message))

    # ---- topics ----

    async def reconcile_topic(
        self, body: kopf.Body, spec: Mapping[str, Any], name: str, previous: Mapping[str, Any], patch: Patch,
        logger: logging.Logger | logging.LoggerAdapter[Any], claims: kopf.Index[Any, ownership.Claim], *,
        spec_lowered: bool = False,
    ) -> None:
        with self.metrics.reconciling("topic") as outcome:
            if paused(body):
                outcome.result = "paused"
                self._paused(body, previous, patch, "the topic")
                return
            try:
                desired = desired_topic(spec, name)
                check_unchanged(str(previous.get("topic") or ""), desired.topic, TOPIC_IDENTITY)
            except SpecError as error:
                outcome.result = "invalid"
                raise self._fail(body, previous, patch, error, f"reconciling topic {name}") from None
            first = ownership.conflict_with(ownership.claim_of("Topic", body), claims.get(desired.topic, ()))
            if first is not None:
                outcome.result = "conflict"
                self._conflict(body, previous, patch, f"topic {desired.topic}", first, logger)
                return
            await self._apply_topic(body, desired, name, previous, patch, logger, spec_lowered)

    async def _apply_topic(
        self, body: kopf.Body, desired: DesiredTopic, name: str, previous: Mapping[str, Any], patch: Patch,
        logger: logging.Logger | logging.LoggerAdapter[Any], spec_lowered: bool,
    ) -> None:
        shrink_reason = reconcile.PARTITIONS_DRIFTED
        old = status.find_condition(previous, status.SYNCED)
        if spec_lowered or (old is not None and old.get("reason") == reconcile.SHRINK_REFUSED):
            shrink_reason = reconcile.SHRINK_REFUSED
        try:
            report = await reconcile.reconcile_topic(self.admin, desired, shrink_reason=shrink_reason)
            seen = await reconcile.observe_topic(self.admin, desired.topic)
        except HeraldError as error:
            raise self._fail(body, previous, patch, error, f"reconciling topic {name}") from None
        if report.changes:
            logger.info("topic %s: %s", desired.topic, "; ".join(report.changes))
            kopf.event(body, type="Normal", reason="Changed", message="; ".join(report.changes))
        self._write_status(
            body, previous, patch, status.synced_conditions(True, report.problems, f"topic {desired.topic}"),
            always_warn=spec_lowered, topic=desired.topic, partitions=seen.partitions, backlog=seen.backlog,
            msgRateIn=seen.msg_rate_in, msgRateOut=seen.msg_rate_out)

    async def delete_topic(
        self, body: kopf.Body, spec: Mapping[str, Any], name: str, previous: Mapping[str, Any], patch: Patch,
        logger: logging.Logger | logging.LoggerAdapter[Any], claims: kopf.Index[Any, ownership.Claim],
    ) -> None:
        if paused(body):
            logger.info("topic resource %s deleted while paused: Herald is left as it is", name)
            return
        try:
            desired = desired_topic(spec, name)
        except SpecError:
            return  # never reconciled, so nothing in Herald is this resource's
        if (applied := str(previous.get("topic") or "")) and applied != desired.topic:
            desired = dataclasses.replace(desired, topic=applied)  # the one it manages, not the edited name
        first = ownership.conflict_with(ownership.claim_of("Topic", body), claims.get(desired.topic, ()))
        if first is not None:
            logger.info("topic %s is %s's: deleting this resource leaves it", desired.topic, first.describe())
            return
        try:
            deleted = await reconcile.delete_topic(self.admin, desired)
        except HeraldError as error:
            # Even a refusal is retried: the finalizer must not be lost while the topic exists.
            message = f"deleting topic {desired.topic} failed: {error}"
            reason = status.ADMIN_UNAVAILABLE if error.retryable else status.HERALD_REFUSED
            self._write_status(body, previous, patch, status.failed_conditions(reason, message))
            raise kopf.TemporaryError(message, delay=self.settings.retry_delay) from None
        outcome = "deleted in Herald" if deleted else f"left in Herald (deletionPolicy {desired.deletion_policy.value})"
        logger.info("topic %s: %s", desired.topic, outcome)

    # ---- subscriptions ----

    @staticmethod
    def _topic_of(topic: str, ref: str, namespace: str, index: kopf.Index[Any, str]) -> str:
        """A Subscription's full topic name: given in full, or its Topic resource's ("" when missing)."""
        if topic:
            return topic
        found = list(index.get((namespace, ref), ()))
        return found[0] if found else ""

    def _resolve(
        self, desired: DesiredSubscription, namespace: str, index: kopf.Index[Any, str],
    ) -> DesiredSubscription:
        topic = self._topic_of(desired.topic, desired.topic_ref, namespace, index)
        if not topic:
            raise LookupError(f"Topic resource {desired.topic_ref!r} does not exist in namespace {namespace}")
        return desired.with_topic(topic)

    def _subscription_conflict(
        self, body: kopf.Body, desired: DesiredSubscription, index: kopf.Index[Any, str],
        claims: kopf.Index[Any, SubscriptionClaim],
    ) -> ownership.Claim | None:
        others = [claim for claim, topic, ref in claims.get(desired.subscription, ())
                  if self._topic_of(topic, ref, claim.namespace, index) == desired.topic]
        return ownership.conflict_with(ownership.claim_of("Subscription", body), others)

    async def reconcile_subscription(
        self, body: kopf.Body, spec: Mapping[str, Any], name: str, namespace: str, previous: Mapping[str, Any],
        patch: Patch, logger: logging.Logger | logging.LoggerAdapter[Any], index: kopf.Index[Any, str],
        claims: kopf.Index[Any, SubscriptionClaim],
    ) -> None:
        with self.metrics.reconciling("subscription") as outcome:
            if paused(body):
                outcome.result = "paused"
                self._paused(body, previous, patch, "the subscription")
                return
            try:
                desired = self._resolve(desired_subscription(spec, name), namespace, index)
                check_unchanged(str(previous.get("subscription") or ""), desired.subscription,
                                "spec.subscriptionName")
            except LookupError as error:
                self._write_status(body, previous, patch,
                                   status.failed_conditions(status.TOPIC_NOT_FOUND, f"{error}: waiting for it"))
                raise kopf.TemporaryError(str(error), delay=self.settings.retry_delay) from None
            except SpecError as error:
                outcome.result = "invalid"
                raise self._fail(body, previous, patch, error, f"reconciling subscription {name}") from None
            first = self._subscription_conflict(body, desired, index, claims)
            if first is not None:
                outcome.result = "conflict"
                self._conflict(body, previous, patch, f"subscription {desired.subscription} on {desired.topic}",
                               first, logger)
                return
            await self._apply_subscription(body, desired, name, previous, patch, logger)

    async def _apply_subscription(
        self, body: kopf.Body, desired: DesiredSubscription, name: str, previous: Mapping[str, Any], patch: Patch,
        logger: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        try:
            report = await reconcile.reconcile_subscription(self.admin, desired)
            seen = await reconcile.observe_subscription(self.admin, desired)
        except reconcile.TopicNotReadyError as error:
            self._write_status(body, previous, patch,
                               status.failed_conditions(status.TOPIC_NOT_FOUND, f"{error}: waiting for it"))
            raise kopf.TemporaryError(str(error), delay=self.settings.retry_delay) from None
        except HeraldError as error:
            raise self._fail(body, previous, patch, error, f"reconciling subscription {name}") from None
        if report.changes:
            logger.info("subscription %s on %s: %s", desired.subscription, desired.topic, "; ".join(report.changes))
            kopf.event(body, type="Normal", reason="Changed", message="; ".join(report.changes))
        self._write_status(
            body, previous, patch,
            status.synced_conditions(True, report.problems, f"subscription {desired.subscription} on {desired.topic}"),
            topic=desired.topic, subscription=desired.subscription, backlog=seen.backlog, consumers=seen.consumers)

    async def delete_subscription(
        self, body: kopf.Body, spec: Mapping[str, Any], name: str, namespace: str, previous: Mapping[str, Any],
        patch: Patch, logger: logging.Logger | logging.LoggerAdapter[Any], index: kopf.Index[Any, str],
        claims: kopf.Index[Any, SubscriptionClaim],
    ) -> None:
        if paused(body):
            logger.info("subscription resource %s deleted while paused: Herald is left as it is", name)
            return
        try:
            desired = desired_subscription(spec, name)
        except SpecError:
            return
        try:
            desired = self._resolve(desired, namespace, index)
        except LookupError:  # its Topic resource went first: the topic it last reconciled
            desired = desired.with_topic(str(previous.get("topic") or ""))
        if (applied := str(previous.get("subscription") or "")) and applied != desired.subscription:
            desired = dataclasses.replace(desired, subscription=applied)
        first = self._subscription_conflict(body, desired, index, claims)
        if first is not None:
            logger.info("subscription %s on %s is %s's: deleting this resource leaves it",
                        desired.subscription, desired.topic, first.describe())
            return
        try:
            deleted = await reconcile.delete_subscription(self.admin, desired)
        except HeraldError as error:
            message = f"deleting subscription {desired.subscription} on {desired.topic} failed: {error}"
            reason = status.ADMIN_UNAVAILABLE if error.retryable else status.HERALD_REFUSED
            self._write_status(body, previous, patch, status.failed_conditions(reason, message))
            raise kopf.TemporaryError(message, delay=self.settings.retry_delay) from None
        logger.info("subscription %s on %s: %s", desired.subscription, desired.topic or "(no topic)",
                    "deleted in Herald" if deleted else "left in Herald")


def paused(body: kopf.Body) -> bool:
    """Whether the resource carries the pause annotation (herald.io/paused: "true")."""
    annotations = body.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(PAUSED_ANNOTATION, "")).strip().lower() == "true"


def register(
    settings: OperatorSettings, registry: kopf.OperatorRegistry | None = None,
    metrics: OperatorMetrics | None = None,
) -> kopf.OperatorRegistry:
    """A registry holding every handler of the operator (a new one unless given), counting its
    passes on `metrics`."""
    registry = registry if registry is not None else kopf.OperatorRegistry()
    operator = HeraldOperator(settings, metrics)
    interval = settings.resync_interval

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="herald.io")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="herald.io", key="last-handled-configuration")
        settings.posting.level = logging.WARNING  # events: the operator's own, and warnings
        settings.watching.reconnect_backoff = 1.0
        settings.scanning.disabled = not operator.settings.scanning

    @kopf.on.cleanup(registry=registry)
    async def close(**_: Any) -> None:
        await operator.close()

    # ---- topics ----

    @kopf.index(GROUP, VERSION, TOPICS, registry=registry, id=TOPIC_INDEX)
    def index_topic(name: str, namespace: str | None, spec: Mapping[str, Any], **_: Any) -> dict[tuple[str, str], str]:
        try:
            return {(namespace or "", name): topic_name(spec, name)}
        except SpecError:
            return {}

    @kopf.index(GROUP, VERSION, TOPICS, registry=registry, id=TOPIC_CLAIMS)
    def claim_topic(body: kopf.Body, name: str, spec: Mapping[str, Any], **_: Any) -> dict[str, ownership.Claim]:
        try:
            return {topic_name(spec, name): ownership.claim_of("Topic", body)}
        except SpecError:
            return {}

    @kopf.index(GROUP, VERSION, SUBSCRIPTIONS, registry=registry, id=SUBSCRIPTION_CLAIMS)
    def claim_subscription(
        body: kopf.Body, name: str, spec: Mapping[str, Any], **_: Any,
    ) -> dict[str, SubscriptionClaim]:
        try:
            wanted = desired_subscription(spec, name)
        except SpecError:
            return {}
        return {wanted.subscription: (ownership.claim_of("Subscription", body), wanted.topic, wanted.topic_ref)}

    @kopf.on.create(GROUP, VERSION, TOPICS, registry=registry, id="reconcile")
    @kopf.on.resume(GROUP, VERSION, TOPICS, registry=registry, id="reconcile")
    async def topic_changed(
        body: kopf.Body, spec: kopf.Spec, name: str, status: kopf.Status, patch: kopf.Patch,
        logger: kopf.Logger, **kwargs: Any,
    ) -> None:
        await operator.reconcile_topic(body, spec, name, status, patch, logger, kwargs[TOPIC_CLAIMS])

    @kopf.on.update(GROUP, VERSION, TOPICS, registry=registry, id="update", field="spec")
    async def topic_updated(
        body: kopf.Body, spec: kopf.Spec, name: str, status: kopf.Status, patch: kopf.Patch,
        old: Any, new: Any, logger: kopf.Logger, **kwargs: Any,
    ) -> None:
        before, after = (int((value or {}).get("partitions") or 0) for value in (old, new))
        await operator.reconcile_topic(body, spec, name, status, patch, logger, kwargs[TOPIC_CLAIMS],
                                       spec_lowered=after < before)

    @kopf.timer(GROUP, VERSION, TOPICS, registry=registry, id="resync", interval=interval, initial_delay=interval)
    async def topic_resync(
        body: kopf.Body, spec: kopf.Spec, name: str, status: kopf.Status, patch: kopf.Patch,
        logger: kopf.Logger, **kwargs: Any,
    ) -> None:
        await operator.reconcile_topic(body, spec, name, status, patch, logger, kwargs[TOPIC_CLAIMS])

    @kopf.on.delete(GROUP, VERSION, TOPICS, registry=registry, id="delete")
    async def topic_deleted(
        body: kopf.Body, spec: kopf.Spec, name: str, status: kopf.Status, patch: kopf.Patch,
        logger: kopf.Logger, **kwargs: Any,
    ) -> None:
        await operator.delete_topic(body, spec, name, status, patch, logger, kwargs[TOPIC_CLAIMS])

    # ---- subscriptions ----

    @kopf.on.create(GROUP, VERSION, SUBSCRIPTIONS, registry=registry, id="reconcile")
    @kopf.on.resume(GROUP, VERSION, SUBSCRIPTIONS, registry=registry, id="reconcile")
    @kopf.on.update(GROUP, VERSION, SUBSCRIPTIONS, registry=registry, id="update", field="spec")
    @kopf.timer(GROUP, VERSION, SUBSCRIPTIONS, registry=registry, id="resync", interval=interval,
                initial_delay=interval)
    async def subscription_changed(
        body: kopf.Body, spec: kopf.Spec, name: str, namespace: str | None, status: kopf.Status, patch: kopf.Patch,
        logger: kopf.Logger, **kwargs: Any,
    ) -> None:
        await operator.reconcile_subscription(
            body, spec, name, namespace or "", status, patch, logger, kwargs[TOPIC_INDEX], kwargs[SUBSCRIPTION_CLAIMS])

    @kopf.on.delete(GROUP, VERSION, SUBSCRIPTIONS, registry=registry, id="delete")
    async def subscription_deleted(
        body: kopf.Body, spec: kopf.Spec, name: str, namespace: str | None, status: kopf.Status, patch: kopf.Patch,
        logger: kopf.Logger, **kwargs: Any,
    ) -> None:
        await operator.delete_subscription(
            body, spec, name, namespace or "", status, patch, logger, kwargs[TOPIC_INDEX], kwargs[SUBSCRIPTION_CLAIMS])

    return registry
