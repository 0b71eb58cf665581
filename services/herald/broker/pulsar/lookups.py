"""The questions a Pulsar client asks before it produces or consumes: how many partitions a topic
has (PARTITIONED_METADATA), which broker serves it (LOOKUP: Connect here, or Redirect to its owner,
authoritative, as Pulsar's brokers answer), what topics a namespace holds (GET_TOPICS_OF_NAMESPACE,
for regex and multi-topic consumers). Each answer is a command to write; a refusal is the answer's
own error fields, as Pulsar sends it."""

from __future__ import annotations

import re

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.pulsar.frontend import FrontEnd
from herald.common.codec.names import TopicName
from herald.common.errors import HeraldError, InvalidArgumentError, ServiceNotReadyError
from herald.common.pulsar.errors import server_error

Command = pulsar.BaseCommand
_MODES = {
    pulsar.CommandGetTopicsOfNamespace.PERSISTENT: (True,),
    pulsar.CommandGetTopicsOfNamespace.NON_PERSISTENT: (False,),
    pulsar.CommandGetTopicsOfNamespace.ALL: (True, False),
}


async def _check_lookup(frontend: FrontEnd, role: str | None, topic: str) -> None:
    authorizer = frontend.admission.authorizer
    if authorizer is not None:
        await authorizer.check_lookup(role, topic)


async def partitioned_metadata(
    frontend: FrontEnd, role: str | None, request: pulsar.CommandPartitionedTopicMetadata,
) -> Command:
    answer = pulsar.CommandPartitionedTopicMetadataResponse(request_id=request.request_id)
    try:
        name = TopicName.parse(request.topic)
        await _check_lookup(frontend, role, str(name))
        await frontend.service.resources.check_namespace(name.namespace_name)
        answer.partitions = await frontend.service.get_partitions(str(name))
        answer.response = pulsar.CommandPartitionedTopicMetadataResponse.Success
    except HeraldError as error:
        answer.response = pulsar.CommandPartitionedTopicMetadataResponse.Failed
        answer.error = server_error(error)  # type: ignore[assignment]
        answer.message = str(error)
    return Command(type=Command.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=answer)


async def lookup(frontend: FrontEnd, role: str | None, request: pulsar.CommandLookupTopic) -> Command:
    answer = pulsar.CommandLookupTopicResponse(request_id=request.request_id)
    try:
        name = TopicName.parse(request.topic)
        await _check_lookup(frontend, role, str(name))
        await frontend.service.resources.check_namespace(name.namespace_name)
        owner = await frontend.owners.owner(str(name), role) if frontend.owners is not None else None
        urls = owner or frontend.urls
        kinds = pulsar.CommandLookupTopicResponse
        answer.response = kinds.Redirect if owner else kinds.Connect
        if not urls.pulsar and not urls.pulsar_tls:
            raise ServiceNotReadyError(
                f"the broker that owns {name} serves no Pulsar protocol: look it up again later")
        answer.brokerServiceUrl = urls.pulsar
        if urls.pulsar_tls:
            answer.brokerServiceUrlTls = urls.pulsar_tls
        answer.authoritative = True  # the answer comes from the owner assignment itself: no further lookups
    except HeraldError as error:
        answer.response = pulsar.CommandLookupTopicResponse.Failed
        answer.error = server_error(error)  # type: ignore[assignment]
        answer.message = str(error)
    return Command(type=Command.LOOKUP_RESPONSE, lookupTopicResponse=answer)


async def topics_of_namespace(
    frontend: FrontEnd, role: str | None, request: pulsar.CommandGetTopicsOfNamespace,
) -> Command:
    """Every topic of the namespace in the mode asked for, a partitioned topic by its partitions
    (as Pulsar lists them), filtered by the client's pattern when it sends one."""
    try:
        authorizer = frontend.admission.authorizer
        if authorizer is not None:
            await authorizer.check_namespace(role, request.namespace)
        kinds = _MODES.get(request.mode, (True,))
        topics: list[str] = []
        for topic in await frontend.service.list_topics(request.namespace):
            name = TopicName.parse(topic)
            if name.persistent not in kinds:
                continue
            partitions = await frontend.service.get_partitions(str(name))
            topics.extend([str(name.partition(i)) for i in range(partitions)] if partitions else [str(name)])
        answer = pulsar.CommandGetTopicsOfNamespaceResponse(request_id=request.request_id)
        if request.topics_pattern:
            pattern = _pattern(request.topics_pattern)
            topics = [topic for topic in topics if pattern.fullmatch(topic) or pattern.fullmatch(_short(topic))]
            answer.filtered = True
        answer.topics.extend(sorted(topics))
        return Command(type=Command.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=answer)
    except HeraldError as error:
        return _error(request.request_id, error)


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise InvalidArgumentError(f"topics pattern {text!r} is not a regular expression: {exc}") from None


def _short(topic: str) -> str:
    """A pattern may be written without the domain ("public/default/t.*") as Pulsar's clients allow."""
    return topic.split("://", 1)[-1]


def _error(request_id: int, error: HeraldError) -> Command:
    return Command(type=Command.ERROR, error=pulsar.CommandError(
        request_id=request_id, error=server_error(error), message=str(error)))  # type: ignore[arg-type]
