// The Connections, Channels, Exchanges and Queues tabs: paged lists (one page from the
// API per refresh, with only the columns shown), and the forms that add an exchange or a
// queue.
import { useState } from "preact/hooks";
import { EXCHANGE_ARGUMENTS, QUEUE_ARGUMENTS, typedRows } from "./args.js";
import { Choice, DeclareFields, Form, NO_YES, Status, useAction } from "./forms.js";
import { channelRateColumns } from "./clients.js";
import { api, enc, fmtNum, fmtRate, html, links } from "./lib.js";
import { PagedList } from "./table.js";

// D (durable), AD (auto-delete), I (internal), Excl (exclusive) and the argument names,
// as RabbitMQ's lists show an object's features.
export function Features({ item }) {
  const tags = [];
  if (item.durable) tags.push(["D", "durable"]);
  if (item.auto_delete) tags.push(["AD", "auto-delete"]);
  if (item.internal) tags.push(["I", "internal"]);
  if (item.exclusive) tags.push(["Excl", "exclusive"]);
  for (const key of Object.keys(item.arguments || {})) tags.push([key.replace(/^x-/, ""), key]);
  return html`${tags.map(([text, title]) => html`<abbr class="tag" title=${title}>${text}</abbr> `)}
    ${item.policy ? html`<span class="policy">${item.policy}</span>` : ""}`;
}

const vhostColumn = { label: "Virtual host", sort: "vhost", render: (i) => i.vhost };

export function ConnectionsPage({ vhost }) {
  const columns = [
    vhostColumn,
    { label: "Name", sort: "name", render: (c) => html`<a href=${links.connection(c.name)}>${c.name}</a>` },
    { label: "User name", sort: "user", render: (c) => c.user },
    { label: "State", sort: "state", render: (c) => c.state },
    { label: "SSL / TLS", render: (c) => (c.ssl ? "●" : "○") },
    { label: "Protocol", render: (c) => c.protocol },
    { label: "Channels", sort: "channels", num: true, render: (c) => c.channels },
    { label: "Client", render: (c) => (c.client_properties || {}).product || "" },
  ];
  return html`<div><h1>Connections</h1>
    <${PagedList} path=${(v) => (v ? `/vhosts/${enc(v)}/connections` : "/connections")}
      vhost=${vhost} noun="connections"
      columns=${columns} rowKey=${(c) => c.name}
      fields="name,vhost,user,state,ssl,protocol,channels,client_properties" />
  </div>`;
}

export function ChannelsPage({ vhost }) {
  const mode = (c) => [c.confirm && "C", c.transactional && "T"].filter(Boolean).join(" ");
  const columns = [
    vhostColumn,
    { label: "Channel", sort: "name", render: (c) => html`<a href=${links.channel(c.name)}>${c.name}</a>` },
    { label: "User name", sort: "user", render: (c) => c.user },
    { label: "Mode", render: mode },
    { label: "State", render: (c) => c.state },
    { label: "Unconfirmed", num: true, render: (c) => c.messages_unconfirmed },
    { label: "Prefetch", num: true, render: (c) => c.prefetch_count || "" },
    { label: "Unacked", sort: "messages_unacknowledged", num: true, render: (c) => c.messages_unacknowledged },
    { label: "Consumers", sort: "consumer_count", num: true, render: (c) => c.consumer_count },
    ...channelRateColumns,
  ];
  return html`<div><h1>Channels</h1>
    <${PagedList} path=${(v) => (v ? `/vhosts/${enc(v)}/channels` : "/channels")}
      vhost=${vhost} noun="channels" columns=${columns}
      rowKey=${(c) => c.name}
      fields=${"name,vhost,user,state,confirm,transactional,messages_unconfirmed,prefetch_count,"
        + "messages_unacknowledged,consumer_count,message_stats.publish_details.rate,"
        + "message_stats.confirm_details.rate,message_stats.deliver_get_details.rate,"
        + "message_stats.ack_details.rate"} />
  </div>`;
}

function AddExchange({ vhosts, vhost, onDone }) {
  const [run, status] = useAction(onDone);
  const submit = (v, form) =>
    run(async () => {
      const body = {
        type: v.type,
        durable: v.durable === "true",
        auto_delete: v.auto_delete === "true",
        internal: v.internal === "true",
        arguments: typedRows(v.arguments, "Argument"),
      };
      await api("PUT", `/exchanges/${enc(v.vhost)}/${enc(v.name)}`, body);
      form.name.value = "";
    }, `Exchange '${v.name}' added.`);
  const types = ["direct", "fanout", "topic", "headers", "x-consistent-hash", "x-delayed-message"];
  return html`<details class="add"><summary>Add a new exchange</summary>
    <${Form} name="add-exchange" onSubmit=${submit}>
      <${DeclareFields} vhosts=${vhosts} vhost=${vhost} shortcuts=${EXCHANGE_ARGUMENTS}
        extra=${html`<${Choice} label="Internal" name="internal" options=${NO_YES} />`}>
        <${Choice} label="Type" name="type" options=${types.map((t) => [t, t])} />
      </${DeclareFields}>
      <button type="submit">Add exchange</button>
    </${Form}>
    <${Status} status=${status} />
  </details>`;
}

export function ExchangesPage({ vhost, vhosts }) {
  const [version, setVersion] = useState(0);
  const columns = [
    vhostColumn,
    { label: "Name", sort: "name", render: (e) => html`<a href=${links.exchange(e.vhost, e.name)}>${e.name || "(AMQP default)"}</a>` },
    { label: "Type", sort: "type", render: (e) => e.type },
    { label: "Features", render: (e) => html`<${Features} item=${e} />` },
    { label: "Message rate in", num: true, render: (e) => fmtRate(e.message_stats?.publish_in_details) },
    { label: "Message rate out", num: true, render: (e) => fmtRate(e.message_stats?.publish_out_details) },
  ];
  return html`<div><h1>Exchanges</h1>
    <${PagedList} key=${version} path="/exchanges" vhost=${vhost} noun="exchanges"
      columns=${columns} rowKey=${(e) => `${e.vhost}/${e.name}`}
      fields="name,vhost,type,durable,auto_delete,internal,arguments,policy,message_stats" />
    <${AddExchange} vhosts=${vhosts} vhost=${vhost} onDone=${() => setVersion((n) => n + 1)} />
  </div>`;
}

function AddQueue({ vhosts, vhost, onDone }) {
  const [run, status] = useAction(onDone);
  const submit = (v, form) =>
    run(async () => {
      const args = typedRows(v.arguments, "Argument");
      if (v.type !== "classic") args["x-queue-type"] = v.type;
      const body = { durable: v.durable === "true", auto_delete: v.auto_delete === "true", arguments: args };
      await api("PUT", `/queues/${enc(v.vhost)}/${enc(v.name)}`, body);
      form.name.value = "";
    }, `Queue '${v.name}' added.`);
  return html`<details class="add" open><summary>Add a new queue</summary>
    <${Form} name="add-queue" onSubmit=${submit}>
      <${DeclareFields} vhosts=${vhosts} vhost=${vhost} shortcuts=${QUEUE_ARGUMENTS}>
        <${Choice} label="Type" name="type"
          options=${[["classic", "Classic"], ["quorum", "Quorum"], ["stream", "Stream"]]} />
      </${DeclareFields}>
      <button type="submit">Add queue</button>
    </${Form}>
    <${Status} status=${status} />
  </details>`;
}

export function QueuesPage({ vhost, vhosts }) {
  const [version, setVersion] = useState(0);
  const stats = (q, key) => fmtRate(q.message_stats?.[`${key}_details`]);
  const columns = [
    vhostColumn,
    { label: "Name", sort: "name", render: (q) => html`<a href=${links.queue(q.vhost, q.name)}>${q.name}</a>` },
    { label: "Type", render: (q) => q.type },
    { label: "Features", render: (q) => html`<${Features} item=${q} />` },
    { label: "State", render: (q) => q.state },
    { label: "Ready", sort: "messages_ready", num: true, render: (q) => fmtNum(q.messages_ready) },
    { label: "Unacked", sort: "messages_unacknowledged", num: true, render: (q) => fmtNum(q.messages_unacknowledged) },
    { label: "Total", sort: "messages", num: true, render: (q) => fmtNum(q.messages) },
    { label: "incoming", sort: "message_stats.publish_details.rate", num: true, render: (q) => stats(q, "publish") },
    { label: "deliver / get", sort: "message_stats.deliver_get_details.rate", num: true, render: (q) => stats(q, "deliver_get") },
    { label: "ack", sort: "message_stats.ack_details.rate", num: true, render: (q) => stats(q, "ack") },
  ];
  const fields = "name,vhost,type,durable,auto_delete,exclusive,arguments,policy,state,messages,"
    + "messages_ready,messages_unacknowledged,message_stats.publish_details.rate,"
    + "message_stats.deliver_get_details.rate,message_stats.ack_details.rate";
  return html`<div><h1>Queues</h1>
    <${PagedList} key=${version} path="/queues" vhost=${vhost} noun="queues" columns=${columns}
      rowKey=${(q) => `${q.vhost}/${q.name}`} fields=${fields} />
    <${AddQueue} vhosts=${vhosts} vhost=${vhost} onDone=${() => setVersion((n) => n + 1)} />
  </div>`;
}
