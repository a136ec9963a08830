// One page per queue and per exchange: charts of their history, details, consumers with
// prefetch, bindings (add, remove), publish a message, get messages, purge, delete.
import { useState } from "preact/hooks";
import {
  EXCHANGE_RATES, HistoryChart, QUEUE_RATES, QUEUED, RangePicker, rangeQuery, useRange,
} from "./charts.js";
import { ArgRows, NUMERIC_PROPERTIES, PROPERTIES, typedRows } from "./args.js";
import { confirmed, Field, Form, Status, useAction } from "./forms.js";
import { api, enc, fmtBytes, fmtNum, get, html, json, links, usePoll } from "./lib.js";
import { Features } from "./lists.js";
import { Facts, Table } from "./table.js";

const exchangePath = (vhost, name) => `/exchanges/${enc(vhost)}/${enc(name || "amq.default")}`;

// Where a message goes: the exchange (amq.default for a queue's own form).
function Publish({ vhost, exchange, routingKey, onDone }) {
  const [run, status] = useAction(onDone);
  const submit = (v) =>
    run(async () => {
      const properties = typedRows(v.properties, "Property", NUMERIC_PROPERTIES);
      const headers = typedRows(v.headers, "Header");
      if (Object.keys(headers).length) properties.headers = headers;
      if (v.delivery_mode) properties.delivery_mode = Number(v.delivery_mode);
      const body = {
        properties,
        routing_key: routingKey !== undefined ? routingKey : v.routing_key,
        payload: v.payload,
        payload_encoding: v.payload_encoding,
      };
      return api("POST", `${exchangePath(vhost, exchange)}/publish`, body);
    }, (r) => (r && r.routed ? "Message published." : "Message published, but not routed."));
  return html`<section id="publish"><h2>Publish message</h2>
    <${Form} name="publish" onSubmit=${submit}>
      ${routingKey === undefined && html`<${Field} label="Routing key"><input name="routing_key" /></${Field}>`}
      <${Field} label="Delivery mode"><select name="delivery_mode">
        <option value="1">1 - Non-persistent</option><option value="2">2 - Persistent</option>
      </select></${Field}>
      <${ArgRows} name="headers" label="Headers" />
      <${ArgRows} name="properties" label="Properties" types=${false} keys=${PROPERTIES} />
      <${Field} label="Payload"><textarea name="payload" rows="4"></textarea></${Field}>
      <${Field} label="Payload encoding"><select name="payload_encoding">
        <option value="string">String (default)</option><option value="base64">Base64</option>
      </select></${Field}>
      <button type="submit">Publish message</button>
    </${Form}>
    <${Status} status=${status} />
  </section>`;
}

function GetMessages({ vhost, name, onDone }) {
  const [run, status] = useAction(onDone);
  const [messages, setMessages] = useState(null);
  const submit = (v) =>
    run(async () => {
      const body = { count: Number(v.count) || 1, ackmode: v.ackmode, encoding: v.encoding, truncate: 50000 };
      const got = await api("POST", `/queues/${enc(vhost)}/${enc(name)}/get`, body);
      setMessages(got);
      return got;
    }, (got) => (got.length ? "" : "Queue is empty"));
  return html`<section id="get"><h2>Get messages</h2>
    <p class="muted">Warning: getting messages from a queue is a destructive action.</p>
    <${Form} name="get" onSubmit=${submit}>
      <${Field} label="Ack mode"><select name="ackmode">
        <option value="ack_requeue_true">Nack message requeue true</option>
        <option value="ack_requeue_false">Automatic ack</option>
        <option value="reject_requeue_true">Reject requeue true</option>
        <option value="reject_requeue_false">Reject requeue false</option>
      </select></${Field}>
      <${Field} label="Encoding"><select name="encoding">
        <option value="auto">Auto string / base64</option><option value="base64">base64</option>
      </select></${Field}>
      <${Field} label="Messages"><input name="count" type="number" min="1" value="1" /></${Field}>
      <button type="submit">Get Message(s)</button>
    </${Form}>
    <${Status} status=${status} />
    ${messages && messages.map((m, i) => html`<div class="message" data-message=${i + 1}>
      <h3>Message ${i + 1}</h3>
      <p>The server reported ${m.message_count} messages remaining.</p>
      <${Facts} rows=${[
        ["Exchange", m.exchange || "(AMQP default)"],
        ["Routing Key", m.routing_key],
        ["Redelivered", m.redelivered ? "●" : "○"],
        ["Properties", html`<code>${json(m.properties)}</code>`],
        ["Payload", html`<span class="muted">${m.payload_bytes} bytes, Encoding: ${m.payload_encoding}</span>
          <pre class="payload">${m.payload}</pre>`],
      ]} />
    </div>`)}
  </section>`;
}

function Bindings({ vhost, rows, own, onDone, queueName }) {
  const [run, status] = useAction(onDone);
  const unbind = (b) =>
    run(() => api("DELETE", `/bindings/${enc(vhost)}/e/${enc(b.source)}/${b.destination_type === "queue" ? "q" : "e"}/${enc(b.destination)}/${enc(b.properties_key)}`), "Binding removed.");
  const add = (v) =>
    run(async () => {
      const body = { routing_key: v.routing_key, arguments: typedRows(v.arguments, "Argument") };
      const [source, kind, destination] = queueName !== undefined
        ? [v.source, "q", queueName] : [own, v.kind, v.destination];
      await api("POST", `/bindings/${enc(vhost)}/e/${enc(source)}/${kind}/${enc(destination)}`, body);
    }, "Binding added.");
  const columns = [
    queueName !== undefined
      ? { label: "From", render: (b) => (b.source ? html`<a href=${links.exchange(vhost, b.source)}>${b.source}</a>` : "(Default exchange binding)") }
      : { label: "To", render: (b) => (b.destination_type === "queue"
        ? html`<a href=${links.queue(vhost, b.destination)}>${b.destination}</a>`
        : html`<a href=${links.exchange(vhost, b.destination)}>${b.destination}</a>`) },
    { label: "Routing key", render: (b) => b.routing_key },
    { label: "Arguments", render: (b) => (Object.keys(b.arguments || {}).length ? json(b.arguments) : "") },
    { label: "", render: (b) => (b.source ? html`<button type="button" onClick=${() => unbind(b)}>Unbind</button>` : "") },
  ];
  return html`<section id="bindings"><h2>Bindings</h2>
    <${Table} columns=${columns} rows=${rows} empty="... no bindings ..." />
    <h3>${queueName !== undefined ? "Add binding to this queue" : "Add binding from this exchange"}</h3>
    <${Form} name="bind" onSubmit=${add}>
      ${queueName !== undefined
        ? html`<${Field} label="From exchange"><input name="source" required /></${Field}>`
        : html`<${Field} label="To"><select name="kind"><option value="q">To queue</option>
            <option value="e">To exchange</option></select></${Field}>
          <${Field} label="Destination"><input name="destination" required /></${Field}>`}
      <${Field} label="Routing key"><input name="routing_key" /></${Field}>
      <${ArgRows} name="arguments" label="Arguments" />
      <button type="submit">Bind</button>
    </${Form}>
    <${Status} status=${status} />
  </section>`;
}

function Delete({ what, path, after, extra }) {
  const [run, status] = useAction(() => { location.hash = after; });
  const go = () => confirmed() && run(() => api("DELETE", path), `${what} deleted.`);
  return html`<section id="delete"><h2>Delete</h2>
    <button type="button" class="danger" onClick=${go}>Delete ${what}</button>${extra}
    <${Status} status=${status} /></section>`;
}

export function QueuePage({ vhost, name }) {
  const [range, rangeKey, setRange] = useRange();
  const path = `/queues/${enc(vhost)}/${enc(name)}`;
  const queue = usePoll(() => get(`${path}?${rangeQuery(range)}`), [path, rangeKey]);
  const bindings = usePoll(() => get(`${path}/bindings`), [path]);
  const reload = () => { queue.reload(); bindings.reload(); };
  const [run, status] = useAction(reload);
  const purge = () => run(() => api("DELETE", `${path}/contents`), "Queue purged");
  const q = queue.data;
  if (queue.error && !q) return html`<p class="error">Queue ${name}: ${queue.error.message}</p>`;
  if (!q) return html`<p class="muted">Loading...</p>`;
  const consumerColumns = [
    { label: "Channel", render: (c) => html`<a href=${links.channel(c.channel_details.name)}>${c.channel_details.name}</a>` },
    { label: "Consumer tag", render: (c) => c.consumer_tag },
    { label: "Ack required", render: (c) => (c.ack_required ? "●" : "○") },
    { label: "Exclusive", render: (c) => (c.exclusive ? "●" : "○") },
    { label: "Prefetch count", num: true, render: (c) => c.prefetch_count },
    { label: "Active", render: (c) => (c.active ? "●" : "○") },
    { label: "Arguments", render: (c) => (Object.keys(c.arguments || {}).length ? json(c.arguments) : "") },
  ];
  return html`<div id="queue-page">
    <h1>Queue <b>${q.name}</b> <span class="muted">in virtual host ${q.vhost}</span></h1>
    <${RangePicker} value=${rangeKey} onChange=${setRange} />
    <div class="charts">
      <${HistoryChart} age=${range.age} title="Queued messages" source=${q} names=${QUEUED} unit="messages" />
      <${HistoryChart} age=${range.age} title="Message rates" source=${q.message_stats} names=${QUEUE_RATES}
        rates=${true} unit="msg/s" />
    </div>
    <${Facts} rows=${[
      ["Type", q.type],
      ["Features", html`<${Features} item=${q} />`],
      ["State", q.state],
      ["Consumers", q.consumers],
      ["Ready", html`<span id="ready">${fmtNum(q.messages_ready)}</span>`],
      ["Unacked", fmtNum(q.messages_unacknowledged)],
      ["Total", html`<span id="total">${fmtNum(q.messages)}</span>`],
      ["Message body bytes", fmtBytes(q.message_bytes)],
      q.owner_pid_details && ["Exclusive owner", html`<a href=${links.connection(q.owner_pid_details.name)}>${q.owner_pid_details.name}</a>`],
    ]} />
    <section id="consumers"><h2>Consumers</h2>
      <${Table} columns=${consumerColumns} rows=${q.consumer_details} empty="... no consumers ..." />
    </section>
    <${Bindings} vhost=${vhost} rows=${bindings.data} queueName=${name} onDone=${reload} />
    <${Publish} vhost=${vhost} exchange="" routingKey=${name} onDone=${reload} />
    <${GetMessages} vhost=${vhost} name=${name} onDone=${reload} />
    <${Delete} what="Queue" path=${path} after="#/queues"
      extra=${html` <button type="button" onClick=${purge}>Purge Messages</button>`} />
    <${Status} status=${status} />
  </div>`;
}

export function ExchangePage({ vhost, name }) {
  const [range, rangeKey, setRange] = useRange();
  const own = name === "amq.default" ? "" : name;
  const path = exchangePath(vhost, own);
  const exchange = usePoll(() => get(`${path}?${rangeQuery(range)}`), [path, rangeKey]);
  const source = usePoll(() => get(`${path}/bindings/source`), [path]);
  const reload = () => { exchange.reload(); source.reload(); };
  const x = exchange.data;
  if (exchange.error && !x) return html`<p class="error">Exchange ${name}: ${exchange.error.message}</p>`;
  if (!x) return html`<p class="muted">Loading...</p>`;
  return html`<div id="exchange-page">
    <h1>Exchange <b>${x.name || "(AMQP default)"}</b> <span class="muted">in virtual host ${x.vhost}</span></h1>
    <${RangePicker} value=${rangeKey} onChange=${setRange} />
    <div class="charts">
      <${HistoryChart} age=${range.age} title="Message rates" source=${x.message_stats} names=${EXCHANGE_RATES}
        rates=${true} unit="msg/s" />
    </div>
    <${Facts} rows=${[["Type", x.type], ["Features", html`<${Features} item=${x} />`]]} />
    ${own && html`<${Bindings} vhost=${vhost} rows=${source.data} own=${own} onDone=${reload} />`}
    <${Publish} vhost=${vhost} exchange=${own} onDone=${reload} />
    ${own && !own.startsWith("amq.") && html`<${Delete} what="Exchange" path=${path} after="#/exchanges" />`}
  </div>`;
}
