"""The control channel: ``leveret ctl`` and ``leveret diagnostics`` (rabbitmqctl and
rabbitmq-diagnostics) talking to a running node without management credentials.

RabbitMQ's CLI tools reach the node over Erlang distribution, authenticated by the
Erlang cookie, a file only the user running the node may read. Leveret's equivalent is a
unix socket (:mod:`.endpoint`): mode 0600 in the data directory (or a private runtime
directory), and the node serves only peers whose uid (``SO_PEERCRED``) is its own or
root's. Modules:

- :mod:`.endpoint`: where the socket is, the wire format both ends share;
- :mod:`.node`: the listener in the broker (started by :class:`leveret.server.Server`,
  which hands it the shared state, :class:`leveret.node.state.ServerState`: the commands read
  and change that, never the ``Server``);
- :mod:`.dispatch`: runs a request on the node; :mod:`.commands`, :mod:`.runtime`,
  :mod:`.settings`, :mod:`.listing`: what each command does there, through the node's and
  the management API's own functions (users, permissions, policies, definitions, queues,
  limits, parameters, the memory and disk monitors);
- :mod:`.cli`, :mod:`.specs`, :mod:`.output`: the command line and its formatters.

Rule at the door: an operator package, above the wire: it may import :mod:`leveret.wire`,
:mod:`leveret.session`, :mod:`leveret.node`, :mod:`leveret.trace`, :mod:`leveret.faults`
and :mod:`leveret.management` (the definitions and views both tools share), never
:mod:`leveret.server`, which starts its listener; the server and the CLI import it.
"""
