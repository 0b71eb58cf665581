"""The secure fuzz target: `herald standalone` with TLS on every port, token authentication and
authorization, holding two tenants. The attacker, `alice`, is who the fuzzers act as: its tenant
admin role for admin requests, a produce-only role on `alice/entries` for hostile entries. The
victim, `bob`, has namespaces with policies, topics (one partitioned), grants, subscriptions with
dead-letter policies and a backlog, and checking traffic on `bob/ns/checked` the whole time; a
snapshot of all of it (`victim_snapshot`, each answer's bytes) is compared before and after."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from herald.api.v1 import admin_pb2, broker_pb2
from herald.client import AuthenticationToken, Client, InitialPosition
from herald.client.admin import SyncAdminClient
from herald.common.errors import AuthorizationError

from tests.conftest import StandaloneProcess
from tests.fuzz.target import CHECK_TENANT, DEADLINE, FUZZ_ENV, CheckingTraffic, FuzzTarget
from tests.security.conftest import ADMIN, Keys, Pki, new_keys, new_pki, secure_process

T = TypeVar("T")

ATTACKER, VICTIM = "alice", "bob"
ATTACKER_ADMIN = "alice-admin"  # alice's tenant admin: the admin fuzzer's role
ATTACKER_PRODUCER = "alice-producer"  # produce on alice/entries only: the entry fuzzer's role
ATTACKER_READER = "alice-reader"  # consume on alice/entries: the consumer the hostile entries reach
ENTRIES_NAMESPACE = f"{ATTACKER}/entries"  # where hostile entries go; the admin fuzzer never names it
ADMIN_NAMESPACE = f"{ATTACKER}/admin"  # what the admin fuzzer acts on as its own
ENTRIES_TOPIC = f"persistent://{ENTRIES_NAMESPACE}/hostile"
VICTIM_ADMIN, VICTIM_APP, VICTIM_READER = "bob-admin", "bob-app", "bob-reader"
VICTIM_NAMESPACES = (f"{VICTIM}/ns", f"{VICTIM}/quiet")
VICTIM_CHECKED = f"persistent://{VICTIM}/ns/checked"  # the checking traffic's
VICTIM_PLAIN = f"persistent://{VICTIM}/ns/plain"  # a backlog, two subscriptions, a dead-letter policy
VICTIM_PARTED = f"persistent://{VICTIM}/ns/parted"  # 2 partitions, a subscription on each
VICTIM_QUIET = f"persistent://{VICTIM}/quiet/kept"
VICTIM_TOPICS = (VICTIM_CHECKED, VICTIM_PLAIN, VICTIM_PARTED, f"{VICTIM_PARTED}-partition-0",
                 f"{VICTIM_PARTED}-partition-1", VICTIM_QUIET)
# Topics whose entries and cursors stay as set up (the checking traffic's move: left out).
STILL = (VICTIM_PLAIN, f"{VICTIM_PARTED}-partition-0", f"{VICTIM_PARTED}-partition-1", VICTIM_QUIET)
ADMIN_PATH = "/herald.v1.AdminService/"


def _identity(raw: bytes) -> bytes:
    return raw


class TenantsTarget(FuzzTarget):
    """The secure standalone, its two tenants and the victim's checking traffic."""

    def __init__(self, server: StandaloneProcess, pki: Pki, keys: Keys, checker: CheckingTraffic) -> None:
        super().__init__(server, checker)
        self.pki = pki
        self.keys = keys
        self._admin_channels: dict[tuple[int, str], grpc.Channel] = {}

    # ---- connections ----

    def channel(self, port: int) -> grpc.Channel:
        return grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(self.pki.ca_cert.read_bytes()))

    def client(self, url: str, role: str = ADMIN) -> Client:
        return Client(url, auth=AuthenticationToken(self.keys.token(role)),
                      tls_trust_certs_file_path=str(self.pki.ca_cert), operation_timeout=DEADLINE,
                      connection_timeout=10.0, stats_interval=0)

    def admin_call(self, method: str, request: bytes, role: str, port: int | None = None) -> bytes:
        """One AdminService call made with raw bytes as `role`, on the broker (or `port`)."""
        key = (port or self.server.broker_port, role)
        channel = self._admin_channels.get(key)
        if channel is None:
            credentials = grpc.composite_channel_credentials(
                grpc.ssl_channel_credentials(self.pki.ca_cert.read_bytes()),
                grpc.access_token_call_credentials(self.keys.token(role)))
            channel = self._admin_channels[key] = grpc.secure_channel(f"127.0.0.1:{key[0]}", credentials)
        call = channel.unary_unary(ADMIN_PATH + method, request_serializer=_identity, response_deserializer=_identity)
        reply: bytes = call(request, timeout=DEADLINE)
        return reply

    def close(self) -> None:
        for channel in self._admin_channels.values():
            channel.close()
        self._admin_channels.clear()

    # ---- the victim's state ----

    def _as_admin(self, method: str, request: Message, reply_type: type[T]) -> T:
        raw = self.admin_call(method, request.SerializeToString(), ADMIN)
        return reply_type.FromString(raw)  # type: ignore[attr-defined, no-any-return]

    def victim_snapshot(self) -> dict[str, bytes]:
        """Everything of bob's an admin call can change, each answer's bytes (deterministic
        serialisation), read by the super-user: the tenant, its namespaces, their policies, grants
        and topics, each topic's partitions, policies, grants, subscriptions with their dead-letter
        policies, and (but for the checking traffic's topic) its entries and cursors."""
        taken: dict[str, bytes] = {}

        def keep(name: str, method: str, request: Message, reply_type: type[Message]) -> Message:
            try:
                reply = self._as_admin(method, request, reply_type)
            except grpc.RpcError as exc:  # what failed is part of the state (a topic gone: NOT_FOUND)
                taken[name] = f"{exc.code()}: {exc.details()}".encode()
                return reply_type()
            taken[name] = reply.SerializeToString(deterministic=True)
            return reply

        keep("tenant", "GetTenant", admin_pb2.TenantRequest(name=VICTIM), admin_pb2.Tenant)
        namespaces = keep("namespaces", "ListNamespaces", admin_pb2.ListNamespacesRequest(tenant=VICTIM),
                          admin_pb2.ListNamespacesResponse)
        topics = set(VICTIM_TOPICS)
        for namespace in sorted({*VICTIM_NAMESPACES, *namespaces.namespaces}):  # type: ignore[attr-defined]
            keep(f"{namespace} policies", "GetNamespacePolicies", admin_pb2.NamespaceRequest(namespace=namespace),
                 admin_pb2.Policies)
            keep(f"{namespace} permissions", "GetPermissions", admin_pb2.PermissionsRequest(namespace=namespace),
                 admin_pb2.PermissionsResponse)
            listed = keep(f"{namespace} topics", "ListTopics", admin_pb2.ListTopicsRequest(namespace=namespace),
                          admin_pb2.ListTopicsResponse)
            topics.update(listed.topics)  # type: ignore[attr-defined]
        for topic in sorted(topics):
            request = admin_pb2.TopicRequest(topic=topic)
            keep(f"{topic} partitions", "GetPartitions", request, admin_pb2.PartitionsResponse)
            keep(f"{topic} policies", "GetTopicPolicies", request, admin_pb2.Policies)
            keep(f"{topic} permissions", "GetPermissions", admin_pb2.PermissionsRequest(topic=topic),
                 admin_pb2.PermissionsResponse)
            subscriptions = keep(f"{topic} subscriptions", "ListSubscriptions", request,
                                 admin_pb2.ListSubscriptionsResponse)
            for subscription in subscriptions.subscriptions:  # type: ignore[attr-defined]
                keep(f"{topic} {subscription} dead-letter policy", "GetSubscriptionDeadLetterPolicy",
                     admin_pb2.SubscriptionRequest(topic=topic, subscription=subscription), broker_pb2.DeadLetterPolicy)
            if topic in STILL:
                stats = keep(f"{topic} internal stats", "GetInternalStats", request, admin_pb2.InternalStats)
                # The ledger layout may be made anew when a topic loads; entries and cursors may not.
                taken[f"{topic} internal stats"] = admin_pb2.InternalStats(
                    number_of_entries=stats.number_of_entries,  # type: ignore[attr-defined]
                    cursors=stats.cursors,  # type: ignore[attr-defined]
                ).SerializeToString(deterministic=True)
        return taken

    # ---- setting it up ----

    @classmethod
    @contextlib.contextmanager
    def running(cls, directory: Path) -> Iterator[TenantsTarget]:
        pki, keys = new_pki(directory / "pki"), new_keys(_made(directory / "keys"))
        server = secure_process(directory / "data", pki, keys, FUZZ_ENV)
        server.start()
        target: TenantsTarget | None = None
        try:
            with SyncAdminClient(server.service_url, timeout=DEADLINE, auth=AuthenticationToken(keys.token(ADMIN)),
                                 tls_trust_certs_file_path=str(pki.ca_cert)) as admin:
                _make_tenants(admin)
            bob = Client(server.service_url, auth=AuthenticationToken(keys.token(VICTIM_APP)),
                         tls_trust_certs_file_path=str(pki.ca_cert), operation_timeout=DEADLINE, stats_interval=0)
            checker = CheckingTraffic(bob, VICTIM_CHECKED)
            target = cls(server, pki, keys, checker)
            _fill_victim_topics(target)
            until_allowed(checker.start, "bob's checking traffic")
            yield target
            checker.stop()
            target.check_alive()
        finally:
            if target is not None:
                target.close()
            server.stop()


def _made(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def until_allowed(attempt: Callable[[], T], what: str) -> T:
    """`attempt()`, retried while refused: grants are cached by the services for about a second."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            return attempt()
        except AuthorizationError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still refused after {DEADLINE}s") from None
            time.sleep(0.2)


def _make_tenants(admin: Any) -> None:
    """Both tenants, their namespaces, policies, grants, topics and subscriptions (as the super-user)."""
    admin.create_tenant(CHECK_TENANT, allowed_clusters=["standalone"])  # the health checks'
    admin.create_namespace(f"{CHECK_TENANT}/ns")
    admin.create_tenant(ATTACKER, admin_roles=[ATTACKER_ADMIN], allowed_clusters=["standalone"])
    for namespace in (ENTRIES_NAMESPACE, ADMIN_NAMESPACE):
        admin.create_namespace(namespace)
    admin.grant_permission(ATTACKER_PRODUCER, ["produce"], namespace=ENTRIES_NAMESPACE)
    admin.grant_permission(ATTACKER_READER, ["consume"], namespace=ENTRIES_NAMESPACE)
    admin.create_topic(f"persistent://{ADMIN_NAMESPACE}/t")
    admin.create_topic(f"persistent://{ADMIN_NAMESPACE}/parted", 2)

    admin.create_tenant(VICTIM, admin_roles=[VICTIM_ADMIN], allowed_clusters=["standalone"])
    admin.create_namespace(VICTIM_NAMESPACES[0], admin_pb2.Policies(
        message_ttl_seconds=86_400, retention=admin_pb2.RetentionPolicy(time_seconds=3600, size_bytes=-1),
        max_producers_per_topic=50, deduplication_enabled=True))
    admin.create_namespace(VICTIM_NAMESPACES[1], admin_pb2.Policies(max_topics=10, max_message_size=1 << 20))
    admin.grant_permission(VICTIM_APP, ["produce", "consume"], namespace=VICTIM_NAMESPACES[0])
    admin.grant_permission(VICTIM_READER, ["consume"], topic=VICTIM_PLAIN)
    admin.grant_permission(VICTIM_READER, ["consume"], topic=VICTIM_QUIET)
    admin.create_topic(VICTIM_PLAIN)
    admin.create_topic(VICTIM_PARTED, 2)
    admin.create_topic(VICTIM_QUIET)
    admin.set_topic_policies(VICTIM_PLAIN, admin_pb2.Policies(message_ttl_seconds=7200))
    for topic, subscription in ((VICTIM_PLAIN, "sub-a"), (VICTIM_PLAIN, "sub-b"), (VICTIM_PARTED, "sub-p"),
                                (VICTIM_QUIET, "sub-q")):
        admin.create_subscription(topic, subscription, InitialPosition.Earliest)
    admin.set_dead_letter_policy(VICTIM_PLAIN, "sub-a", 3, dead_letter_topic=f"{VICTIM_PLAIN}-dead")
    admin.set_dead_letter_policy(VICTIM_PARTED, "sub-p", 5)


def _fill_victim_topics(target: TenantsTarget) -> None:
    """A backlog on bob's topics, part of it acknowledged on one subscription: cursors to keep."""
    with target.client(target.server.service_url) as client:
        for topic in STILL:
            producer = client.create_producer(topic, batching_enabled=False)
            for number in range(5):
                producer.send(b"bob-%d" % number)
            producer.close()
        consumer = client.subscribe(VICTIM_PLAIN, "sub-b")
        for _ in range(2):
            message = consumer.receive(timeout=DEADLINE)
            assert message is not None
            consumer.acknowledge(message)
        consumer.close()
