"""Policies: the pure rules (exchanges/policies.py), and what the broker keeps of them.

The management API and the behaviour through AMQP are in tests/integration/test_policies.py
(run against RabbitMQ too); here: matching and resolution rules, a policy surviving a
restart with a data dir (and applying to the queues recovered with it), and definitions.json
import and export.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pika
import pytest

from leveret.cli import dump_objects
from leveret.config import Config
from leveret.exchanges.policies import (
    PolicyError,
    effective_definition,
    erl_term,
    match,
    parse,
    queue_arguments,
)
from leveret.management.definitions import (
    DefinitionsError,
    export_definitions,
    load_definitions,
)
from tests.conftest import BrokerThread


def policy(name: str, pattern: str, definition: dict[str, Any], **extra: Any) -> Any:
    return parse("/", name, {"pattern": pattern, "definition": definition, **extra})


def test_match_takes_the_highest_priority_then_the_first_name() -> None:
    low = policy("low", "^orders", {"max-length": 9}, priority=1)
    high = policy("high", "^orders\\.eu", {"max-length": 1}, priority=5)
    tie = policy("a-tie", "eu$", {"max-length": 2}, priority=5)
    policies = [low, high, tie]
    assert match(policies, "queue", "orders.eu") is tie  # same priority: "a-tie" < "high"
    assert match(policies, "queue", "orders.us") is low
    assert match(policies, "queue", "invoices") is None
    # The pattern is searched, not matched from the start: "eu$" finds "x.eu".
    assert match(policies, "queue", "x.eu") is tie


def test_apply_to() -> None:
    queues = policy("q", ".*", {"max-length": 1}, **{"apply-to": "queues"})
    exchanges = policy("x", ".*", {"alternate-exchange": "ae"}, **{"apply-to": "exchanges"})
    both = policy("all", ".*", {"expires": 1000})
    assert match([queues, exchanges], "queue", "n") is queues
    assert match([queues, exchanges], "exchange", "n") is exchanges
    assert both.apply_to == "all" and match([both], "exchange", "n") is both


def test_queue_arguments_resolve_as_rabbitmq() -> None:
    given = policy(
        "p",
        ".*",
        {
            "message-ttl": 5000,
            "max-length": 10,
            "dead-letter-exchange": "policy-dlx",
            "overflow": "reject-publish",
            "ha-mode": "all",
        },
    )
    own = {"x-message-ttl": 1000, "x-max-length": 20, "x-dead-letter-exchange": "own-dlx"}
    assert queue_arguments(own, given.definition) == {
        "x-message-ttl": 1000,  # the lower wins
        "x-max-length": 10,  # the lower wins
        "x-dead-letter-exchange": "own-dlx",  # the argument wins
        "x-overflow": "reject-publish",  # only the policy sets it
    }
    assert queue_arguments(own, {}) == own


@pytest.mark.parametrize(
    ("argument", "effective"), [(100, 100), (900, 500), ("100", 500), (True, 500), (None, 500)]
)
def test_a_consumer_timeout_resolves_as_erlangs_min(argument: object, effective: int) -> None:
    # rabbit_channel:get_queue_consumer_timeout/2 takes erlang:min/2 of the policy's value
    # and the argument, and in Erlang's term order a number sorts before any other type.
    own = {} if argument is None else {"x-consumer-timeout": argument}
    resolved = queue_arguments(own, {"consumer-timeout": 500})
    assert resolved["x-consumer-timeout"] == effective


def test_operator_policies_take_numeric_queue_keys_and_the_lower_value_wins() -> None:
    with pytest.raises(PolicyError) as err:
        parse("/", "op", {"pattern": ".*", "definition": {"overflow": "drop-head"}}, True)
    assert err.value.reason == (
        "Validation failed\n\n"
        '[{<<"overflow">>,<<"drop-head">>}] are not recognised policy settings\n'
    )
    with pytest.raises(PolicyError) as err:
        parse("/", "op", {"pattern": ".*", "definition": {"expires": 0}}, True)
    assert err.value.reason == "Validation failed\n\n0 is not a valid queue expiry\n"
    operator = parse(
        "/", "op", {"pattern": ".*", "definition": {"max-length": 5, "message-ttl": 100}}, True
    )
    given = policy("p", ".*", {"max-length": 3, "message-ttl": 500, "dead-letter-exchange": "d"})
    assert effective_definition(given, operator) == {
        "max-length": 3,
        "message-ttl": 100,
        "dead-letter-exchange": "d",
    }
    assert effective_definition(None, operator) == {"max-length": 5, "message-ttl": 100}
    assert effective_definition(given, None) == dict(given.definition)
    assert effective_definition(None, None) == {}


def test_unknown_keys_are_refused_known_ones_kept() -> None:
    with pytest.raises(PolicyError) as err:
        policy("p", ".*", {"max-priority": 5})
    assert err.value.reason == (
        'Validation failed\n\n[{<<"max-priority">>,5}] are not recognised policy settings\n'
    )
    kept = policy("p", ".*", {"ha-mode": "all", "queue-mode": "lazy", "delivery-limit": 5})
    assert dict(kept.definition) == {"ha-mode": "all", "queue-mode": "lazy", "delivery-limit": 5}


def test_bad_pattern() -> None:
    with pytest.raises(PolicyError) as err:
        policy("p", "(", {"expires": 1})
    assert err.value.reason.startswith(
        "Validation failed\n\npattern should be regular expression but is invalid: {"
    )


def test_erl_terms() -> None:
    assert erl_term('a"b') == '<<"a\\"b">>'
    assert erl_term([1, 1.5, True, None]) == "[1,1.5,true,null]"
    assert (erl_term(1e20), erl_term(1.5e-5), erl_term(0.25)) == ("1.0e20", "1.5e-5", "0.25")


def test_policies_survive_a_restart_and_apply_to_recovered_queues(tmp_path: Path) -> None:
    broker = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("kept.jobs", durable=True)
        connection.close()
        limit = policy("limit", "^kept\\.", {"max-length": 2}, priority=3)
        assert broker.call(lambda: broker.server.state.set_policy(limit)) is True
    finally:
        broker.stop()
    saved = json.loads((tmp_path / "users.json").read_text())
    assert saved["policies"] == [limit.to_json()]
    # `leveret analyze --topology DATA_DIR` hands the pipeline the policies too.
    assert dump_objects(tmp_path)[-1] == {"event": "policy.set", **limit.to_json()}

    again = BrokerThread(Config(port=0, data_dir=tmp_path)).start()
    try:
        vhost = again.server.state.vhosts["/"]
        assert vhost.policies["limit"] == limit
        assert vhost.queues["kept.jobs"].policy == limit
        connection = pika.BlockingConnection(pika.URLParameters(again.url))
        channel = connection.channel()
        for i in range(4):
            channel.basic_publish("", "kept.jobs", str(i).encode())
        assert channel.queue_declare("kept.jobs", passive=True).method.message_count == 2
        connection.close()
        assert again.call(lambda: again.server.state.delete_policy("/", "limit")) is True
    finally:
        again.stop()
    assert json.loads((tmp_path / "users.json").read_text())["policies"] == []


def test_definitions_import_and_export_policies() -> None:
    broker = BrokerThread(Config(port=0)).start()
    item = {
        "vhost": "/",
        "name": "dlx",
        "pattern": "^work$",
        "apply-to": "queues",
        "definition": {"dead-letter-exchange": "dead", "message-ttl": 60000},
        "priority": 1,
    }
    try:
        definitions = {
            "policies": [item],
            "queues": [{"name": "work", "vhost": "/", "durable": True, "arguments": {}}],
        }
        broker.call(lambda: load_definitions(broker.server.state, definitions))
        queue = broker.server.state.vhosts["/"].queues["work"]
        assert (queue.dlx, queue.message_ttl) == ("dead", 60000)
        exported = broker.call(lambda: export_definitions(broker.server.state))
        assert exported["policies"] == [item]
        one_vhost = broker.call(lambda: export_definitions(broker.server.state, "/"))
        # With its vhost, as RabbitMQ 3.10.8 exports one vhost's policies (observed).
        assert one_vhost["policies"] == [item]
        bad = {"policies": [{**item, "definition": {"message-ttl": -1}}]}
        with pytest.raises(DefinitionsError) as err:
            broker.call(lambda: load_definitions(broker.server.state, bad))
        assert str(err.value) == "Validation failed\n\n-1 is not a valid message TTL"
    finally:
        broker.stop()
