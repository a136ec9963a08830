// One page per connection (its data rates chart, channels, client properties, close it)
// and per channel (its message rates chart, consumers with their prefetch).
import {
  CHANNEL_RATES, CONNECTION_RATES, HistoryChart, RangePicker, rangeQuery, useRange,
} from "./charts.js";
import { confirmed, Field, Form, Status, useAction } from "./forms.js";
import { api, enc, fmtBytes, fmtRate, get, html, json, links, usePoll } from "./lib.js";
import { Facts, Table } from "./table.js";

const rate = (c, key) => fmtRate(c.message_stats?.[`${key}_details`]);

// A channel's rates as a list row shows them (RabbitMQ's Channels tab: publish, confirm,
// deliver / get, ack), for this page's table and the Channels list.
export const channelRateColumns = [
  { label: "publish", sort: "message_stats.publish_details.rate", num: true, render: (c) => rate(c, "publish") },
  { label: "confirm", sort: "message_stats.confirm_details.rate", num: true, render: (c) => rate(c, "confirm") },
  { label: "deliver / get", sort: "message_stats.deliver_get_details.rate", num: true, render: (c) => rate(c, "deliver_get") },
  { label: "ack", sort: "message_stats.ack_details.rate", num: true, render: (c) => rate(c, "ack") },
];

const channelColumns = [
  { label: "Channel", render: (c) => html`<a href=${links.channel(c.name)}>${c.name}</a>` },
  { label: "Mode", render: (c) => [c.confirm && "C", c.transactional && "T"].filter(Boolean).join(" ") },
  { label: "State", render: (c) => c.state },
  { label: "Unconfirmed", num: true, render: (c) => c.messages_unconfirmed },
  { label: "Prefetch", num: true, render: (c) => c.prefetch_count },
  { label: "Unacked", num: true, render: (c) => c.messages_unacknowledged },
  { label: "Consumers", num: true, render: (c) => c.consumer_count },
  ...channelRateColumns,
];

// bytes/s, as the connection chart's legend and the facts show them.
const bytesRate = (details) => (details ? `${fmtBytes(Math.round(details.rate || 0))}/s` : "");

export function ConnectionPage({ name }) {
  const [range, rangeKey, setRange] = useRange();
  const path = `/connections/${enc(name)}`;
  const conn = usePoll(() => get(`${path}?${rangeQuery(range, ["data_rates"])}`), [path, rangeKey]);
  const channels = usePoll(() => get(`${path}/channels`), [path]);
  const [run, status] = useAction();
  const close = (v) =>
    confirmed("Are you sure you want to close this connection?")
    && run(() => api("DELETE", path, undefined, { "X-Reason": v.reason }), "Connection closed.");
  const c = conn.data;
  if (conn.error) {
    return html`<div><p class="error">Connection ${name}: ${conn.error.status === 404
      ? "closed (no longer on the broker)" : conn.error.message}</p><${Status} status=${status} /></div>`;
  }
  if (!c) return html`<p class="muted">Loading...</p>`;
  const client = c.client_properties || {};
  return html`<div id="connection-page">
    <h1>Connection <b>${c.name}</b></h1>
    <${RangePicker} value=${rangeKey} onChange=${setRange} />
    <div class="charts">
      <${HistoryChart} age=${range.age} title="Data rates" source=${c} names=${CONNECTION_RATES}
        rates=${true} unit="bytes/s" digits=${0} />
    </div>
    <${Facts} rows=${[
      ["Virtual host", c.vhost],
      ["Username", c.user],
      ["State", c.state],
      ["Protocol", c.protocol],
      ["SSL / TLS", c.ssl ? "●" : "○"],
      ["Authentication", c.auth_mechanism],
      ["Heartbeat", `${c.timeout}s`],
      ["Frame max", `${c.frame_max} bytes`],
      ["Channel limit", c.channel_max],
      c.connected_at && ["Connected at", new Date(c.connected_at).toLocaleString()],
      ["Client", `${client.product || ""} ${client.version || ""}`],
      ["Client properties", html`<code>${json(client)}</code>`],
      ["Received", html`${fmtBytes(c.recv_oct)} (${bytesRate(c.recv_oct_details)})`],
      ["Sent", html`${fmtBytes(c.send_oct)} (${bytesRate(c.send_oct_details)})`],
    ]} />
    <section><h2>Channels</h2>
      <${Table} columns=${channelColumns} rows=${channels.data} empty="... no channels ..." />
    </section>
    <section id="close"><h2>Close this connection</h2>
      <${Form} name="close" onSubmit=${close}>
        <${Field} label="Reason"><input name="reason" value="Closed via management plugin" /></${Field}>
        <button type="submit" class="danger">Force Close</button>
      </${Form}>
      <${Status} status=${status} />
    </section>
  </div>`;
}

export function ChannelPage({ name }) {
  const [range, rangeKey, setRange] = useRange();
  const path = `/channels/${enc(name)}`;
  const channel = usePoll(() => get(`${path}?${rangeQuery(range, ["msg_rates"])}`), [path, rangeKey]);
  const ch = channel.data;
  if (channel.error && !ch) return html`<p class="error">Channel ${name}: ${channel.error.message}</p>`;
  if (!ch) return html`<p class="muted">Loading...</p>`;
  const consumerColumns = [
    { label: "Consumer tag", render: (c) => c.consumer_tag },
    { label: "Queue", render: (c) => html`<a href=${links.queue(c.queue.vhost, c.queue.name)}>${c.queue.name}</a>` },
    { label: "Ack required", render: (c) => (c.ack_required ? "●" : "○") },
    { label: "Exclusive", render: (c) => (c.exclusive ? "●" : "○") },
    { label: "Prefetch count", num: true, render: (c) => c.prefetch_count },
    { label: "Active", render: (c) => (c.active ? "●" : "○") },
  ];
  return html`<div id="channel-page">
    <h1>Channel <b>${ch.name}</b></h1>
    <${RangePicker} value=${rangeKey} onChange=${setRange} />
    <div class="charts">
      <${HistoryChart} age=${range.age} title="Message rates" source=${ch.message_stats}
        names=${CHANNEL_RATES} rates=${true} unit="msg/s" />
    </div>
    <${Facts} rows=${[
      ["Connection", html`<a href=${links.connection(ch.connection_details.name)}>${ch.connection_details.name}</a>`],
      ["Virtual host", ch.vhost],
      ["Username", ch.user],
      ["Mode", [ch.confirm && "Confirm", ch.transactional && "Transactional"].filter(Boolean).join(", ") || "Normal"],
      ["State", ch.state],
      ["Prefetch count", ch.prefetch_count],
      ["Global prefetch count", ch.global_prefetch_count],
      ["Messages unacknowledged", ch.messages_unacknowledged],
      ["Messages unconfirmed", ch.messages_unconfirmed],
      ["Messages uncommitted", ch.messages_uncommitted],
      ["Acks uncommitted", ch.acks_uncommitted],
      ["Publish rate", html`<span id="publish-rate">${rate(ch, "publish")}</span>`],
      ["Deliver / get rate", rate(ch, "deliver_get")],
      ["Ack rate", rate(ch, "ack")],
    ]} />
    <section id="consumers"><h2>Consumers</h2>
      <${Table} columns=${consumerColumns} rows=${ch.consumer_details} empty="... no consumers ..." />
    </section>
  </div>`;
}
