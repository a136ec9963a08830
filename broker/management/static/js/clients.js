// One page per connection (its channels, client properties, close it) and per channel
// (its consumers with their prefetch).
import { confirmed, Field, Form, Status, useAction } from "./forms.js";
import { api, enc, get, html, json, links, usePoll } from "./lib.js";
import { Facts, Table } from "./table.js";

const channelColumns = [
  { label: "Channel", render: (c) => html`<a href=${links.channel(c.name)}>${c.name}</a>` },
  { label: "Mode", render: (c) => [c.confirm && "C", c.transactional && "T"].filter(Boolean).join(" ") },
  { label: "State", render: (c) => c.state },
  { label: "Unconfirmed", num: true, render: (c) => c.messages_unconfirmed },
  { label: "Prefetch", num: true, render: (c) => c.prefetch_count },
  { label: "Unacked", num: true, render: (c) => c.messages_unacknowledged },
  { label: "Consumers", num: true, render: (c) => c.consumer_count },
];

export function ConnectionPage({ name }) {
  const path = `/connections/${enc(name)}`;
  const conn = usePoll(() => get(path), [path]);
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
  const path = `/channels/${enc(name)}`;
  const channel = usePoll(() => get(path), [path]);
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
    ]} />
    <section id="consumers"><h2>Consumers</h2>
      <${Table} columns=${consumerColumns} rows=${ch.consumer_details} empty="... no consumers ..." />
    </section>
  </div>`;
}
