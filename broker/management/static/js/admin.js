// Admin: users, virtual hosts, permissions and topic permissions, policies, limits,
// shovels (rabbitmq_shovel_management's Shovel Status and Shovel Management). Each
// section lists what the API has, removes a row with a DELETE and adds or updates with a
// PUT, as RabbitMQ's Admin tab does.
import { useState } from "preact/hooks";
import { confirmed, Field, Form, Status, useAction, VhostSelect } from "./forms.js";
import { api, enc, get, html, json, parseObject, usePoll } from "./lib.js";
import { Table } from "./table.js";

const SECTIONS = [
  ["users", "Users"],
  ["vhosts", "Virtual Hosts"],
  ["permissions", "Permissions"],
  ["policies", "Policies"],
  ["limits", "Limits"],
  ["shovels", "Shovels"],
];

// A list from ``path`` with a remove button per row (``remove(row)`` gives the DELETE
// path) and an add form (``add(values)`` gives [PUT path, body]).
function Section({ id, title, path, columns, remove, add, fields, submitLabel, rowKey }) {
  const list = usePoll(() => get(path), [path]);
  const [run, status] = useAction(list.reload);
  const del = (row) => confirmed() && run(() => api("DELETE", remove(row)), "Deleted.");
  const submit = (values) =>
    run(async () => {
      const [target, body] = add(values);
      await api("PUT", target, body);
    }, "Saved.");
  const withRemove = [
    ...columns,
    { label: "", render: (row) => html`<button type="button" onClick=${() => del(row)}>Delete</button>` },
  ];
  return html`<section id=${id}>
    <h2>${title}</h2>
    ${list.error && html`<p class="error">${list.error.message}</p>`}
    <${Table} columns=${withRemove} rows=${list.data} rowKey=${rowKey} />
    <${Form} name=${id} onSubmit=${submit}>${fields}<button type="submit">${submitLabel}</button></${Form}>
    <${Status} status=${status} />
  </section>`;
}

function Users() {
  return html`<${Section} id="users" title="Users" path="/users" submitLabel="Add / update user"
    rowKey=${(u) => u.name}
    columns=${[
      { label: "Name", render: (u) => u.name },
      { label: "Tags", render: (u) => (u.tags || []).join(", ") },
      { label: "Has password", render: (u) => (u.password_hash ? "●" : "○") },
    ]}
    remove=${(u) => `/users/${enc(u.name)}`}
    add=${(v) => [`/users/${enc(v.name)}`, { password: v.password, tags: v.tags }]}
    fields=${html`
      <${Field} label="Username"><input name="name" required /></${Field}>
      <${Field} label="Password"><input name="password" type="password" /></${Field}>
      <${Field} label="Tags"><input name="tags" placeholder="administrator, monitoring, management, policymaker" /></${Field}>`} />`;
}

function Vhosts() {
  return html`<${Section} id="vhosts" title="Virtual hosts" path="/vhosts" submitLabel="Add virtual host"
    rowKey=${(v) => v.name}
    columns=${[
      { label: "Name", render: (v) => v.name },
      { label: "Description", render: (v) => v.description },
      { label: "Tags", render: (v) => (v.tags || []).join(", ") },
      { label: "Messages", num: true, render: (v) => v.messages },
    ]}
    remove=${(v) => `/vhosts/${enc(v.name)}`}
    add=${(v) => [`/vhosts/${enc(v.name)}`, { description: v.description, tags: v.tags }]}
    fields=${html`
      <${Field} label="Name"><input name="name" required /></${Field}>
      <${Field} label="Description"><input name="description" /></${Field}>
      <${Field} label="Tags"><input name="tags" /></${Field}>`} />`;
}

// What permissions and topic permissions share: whose, where, and write/read regexes.
const regex = (key, label) => ({ label, render: (p) => p[key] });
const WHO = [
  { label: "User", render: (p) => p.user },
  { label: "Virtual host", render: (p) => p.vhost },
];
const WRITE_READ = [regex("write", "Write regexp"), regex("read", "Read regexp")];

function WhoFields({ vhosts }) {
  return html`<${Field} label="User"><input name="user" required /></${Field}>
    <${Field} label="Virtual host"><${VhostSelect} vhosts=${vhosts} /></${Field}>`;
}

function WriteReadFields() {
  return html`<${Field} label="Write regexp"><input name="write" value=".*" /></${Field}>
    <${Field} label="Read regexp"><input name="read" value=".*" /></${Field}>`;
}

function Permissions({ vhosts }) {
  return html`<div>
    <${Section} id="permissions" title="Permissions" path="/permissions" submitLabel="Set permission"
      rowKey=${(p) => `${p.vhost}/${p.user}`}
      columns=${[...WHO, regex("configure", "Configure regexp"), ...WRITE_READ]}
      remove=${(p) => `/permissions/${enc(p.vhost)}/${enc(p.user)}`}
      add=${(v) => [`/permissions/${enc(v.vhost)}/${enc(v.user)}`,
        { configure: v.configure, write: v.write, read: v.read }]}
      fields=${html`<${WhoFields} vhosts=${vhosts} />
        <${Field} label="Configure regexp"><input name="configure" value=".*" /></${Field}>
        <${WriteReadFields} />`} />
    <${Section} id="topic-permissions" title="Topic permissions" path="/topic-permissions"
      submitLabel="Set topic permission" rowKey=${(p) => `${p.vhost}/${p.user}/${p.exchange}`}
      columns=${[...WHO, { label: "Exchange", render: (p) => p.exchange }, ...WRITE_READ]}
      remove=${(p) => `/topic-permissions/${enc(p.vhost)}/${enc(p.user)}`}
      add=${(v) => [`/topic-permissions/${enc(v.vhost)}/${enc(v.user)}`,
        { exchange: v.exchange, write: v.write, read: v.read }]}
      fields=${html`<${WhoFields} vhosts=${vhosts} />
        <${Field} label="Exchange"><input name="exchange" value="amq.topic" /></${Field}>
        <${WriteReadFields} />`} />
  </div>`;
}

function Policies({ vhosts }) {
  return html`<${Section} id="policies" title="Policies" path="/policies" submitLabel="Add / update policy"
    rowKey=${(p) => `${p.vhost}/${p.name}`}
    columns=${[
      { label: "Virtual host", render: (p) => p.vhost },
      { label: "Name", render: (p) => p.name },
      { label: "Pattern", render: (p) => p.pattern },
      { label: "Apply to", render: (p) => p["apply-to"] },
      { label: "Definition", render: (p) => html`<code>${json(p.definition)}</code>` },
      { label: "Priority", num: true, render: (p) => p.priority },
    ]}
    remove=${(p) => `/policies/${enc(p.vhost)}/${enc(p.name)}`}
    add=${(v) => [`/policies/${enc(v.vhost)}/${enc(v.name)}`, {
      pattern: v.pattern, "apply-to": v["apply-to"], priority: Number(v.priority) || 0,
      definition: parseObject(v.definition, "Definition"),
    }]}
    fields=${html`
      <${Field} label="Virtual host"><${VhostSelect} vhosts=${vhosts} /></${Field}>
      <${Field} label="Name"><input name="name" required /></${Field}>
      <${Field} label="Pattern"><input name="pattern" required placeholder="^jobs\\." /></${Field}>
      <${Field} label="Apply to"><select name="apply-to"><option value="all">Exchanges and queues</option>
        <option value="queues">Queues</option><option value="exchanges">Exchanges</option></select></${Field}>
      <${Field} label="Priority"><input name="priority" type="number" value="0" /></${Field}>
      <${Field} label="Definition (JSON)"><textarea name="definition" required
        placeholder='{"max-length": 1000}'></textarea></${Field}>`} />`;
}

// RabbitMQ lists limits as one row per vhost (or user) with all of its limits in
// ``value``; here each limit is a row, so each can be cleared alone.
const flatten = (rows, owner) =>
  (rows || []).flatMap((r) => Object.entries(r.value || {}).map(([name, value]) => ({ [owner]: r[owner], name, value })));

function LimitList({ id, title, path, owner, names, ownerField }) {
  const list = usePoll(() => get(path), [path]);
  const [run, status] = useAction(list.reload);
  const rows = flatten(list.data, owner);
  const base = owner === "vhost" ? "/vhost-limits" : "/user-limits";
  const del = (row) => run(() => api("DELETE", `${base}/${enc(row[owner])}/${enc(row.name)}`), "Limit cleared.");
  const submit = (v) =>
    run(() => api("PUT", `${base}/${enc(v[owner])}/${enc(v.name)}`, { value: Number(v.value) }), "Limit set.");
  return html`<section id=${id}><h2>${title}</h2>
    <${Table} rows=${rows} empty="... no limits ..." columns=${[
      { label: owner === "vhost" ? "Virtual host" : "User", render: (r) => r[owner] },
      { label: "Limit", render: (r) => r.name },
      { label: "Value", num: true, render: (r) => r.value },
      { label: "", render: (r) => html`<button type="button" onClick=${() => del(r)}>Clear</button>` },
    ]} />
    <${Form} name=${id} onSubmit=${submit}>
      <${Field} label=${owner === "vhost" ? "Virtual host" : "User"}>${ownerField}</${Field}>
      <${Field} label="Limit"><select name="name">${names.map((n) => html`<option>${n}</option>`)}</select></${Field}>
      <${Field} label="Value"><input name="value" type="number" required /></${Field}>
      <button type="submit">Set limit</button>
    </${Form}>
    <${Status} status=${status} />
  </section>`;
}

function Limits({ vhosts }) {
  return html`<div>
    <${LimitList} id="vhost-limits" title="Virtual host limits" path="/vhost-limits" owner="vhost"
      names=${["max-connections", "max-queues"]} ownerField=${html`<${VhostSelect} vhosts=${vhosts} />`} />
    <${LimitList} id="user-limits" title="User limits" path="/user-limits" owner="user"
      names=${["max-connections", "max-channels"]} ownerField=${html`<input name="user" required />`} />
  </div>`;
}

// A shovel's value from the form: only the keys given (rabbit_shovel_parameters'
// defaults apply to the rest); a number where RabbitMQ takes one.
function shovelValue(v) {
  const value = { "src-uri": v["src-uri"], "dest-uri": v["dest-uri"], "ack-mode": v["ack-mode"] };
  for (const key of ["src-queue", "src-exchange", "src-exchange-key", "dest-queue", "dest-exchange", "dest-exchange-key"]) {
    if (v[key] !== "") value[key] = v[key];
  }
  if (v["src-prefetch-count"] !== "") value["src-prefetch-count"] = Number(v["src-prefetch-count"]);
  if (v["reconnect-delay"] !== "") value["reconnect-delay"] = Number(v["reconnect-delay"]);
  const after = v["src-delete-after"];
  if (after !== "never") value["src-delete-after"] = /^\d+$/.test(after) ? Number(after) : after;
  if (v["dest-add-forward-headers"]) value["dest-add-forward-headers"] = true;
  return { value };
}

function ShovelStatus({ changes }) {
  const list = usePoll(() => get("/shovels"), [changes]);
  const [run, status] = useAction(list.reload);
  const restart = (s) => run(() => api("DELETE", `/shovels/vhost/${enc(s.vhost)}/${enc(s.name)}/restart`), "Restarted.");
  return html`<section id="shovel-status"><h2>Shovel status</h2>
    ${list.error && html`<p class="error">${list.error.message}</p>`}
    <${Table} rows=${list.data} rowKey=${(s) => `${s.vhost}/${s.name}`} empty="... no shovels ..." columns=${[
      { label: "Name", render: (s) => s.name },
      { label: "Virtual host", render: (s) => s.vhost },
      { label: "State", render: (s) => html`<span class=${`state ${s.state}`}>${s.state}</span>` },
      { label: "Source", render: (s) => s.src_uri ? `${s.src_uri} ${s.src_queue || s.src_exchange || ""}` : "" },
      { label: "Destination", render: (s) => s.dest_uri ? `${s.dest_uri} ${s.dest_queue || s.dest_exchange || ""}` : "" },
      { label: "Reason", render: (s) => s.reason || "" },
      { label: "Last changed", render: (s) => s.timestamp },
      { label: "", render: (s) => html`<button type="button" onClick=${() => restart(s)}>Restart</button>` },
    ]} />
    <${Status} status=${status} />
  </section>`;
}

function Shovels({ vhosts }) {
  // The status table reads again when a shovel is added or deleted below.
  const [changes, setChanges] = useState(0);
  return html`<div>
    <${ShovelStatus} changes=${changes} />
    <${Section} id="shovels" title="Dynamic shovels" path="/parameters/shovel" submitLabel="Add shovel"
      onChange=${() => setChanges((c) => c + 1)}
      rowKey=${(p) => `${p.vhost}/${p.name}`}
      columns=${[
        { label: "Virtual host", render: (p) => p.vhost },
        { label: "Name", render: (p) => p.name },
        { label: "Source", render: (p) => `${p.value["src-uri"]} ${p.value["src-queue"] || p.value["src-exchange"] || ""}` },
        { label: "Destination", render: (p) => `${p.value["dest-uri"]} ${p.value["dest-queue"] || p.value["dest-exchange"] || ""}` },
        { label: "Ack mode", render: (p) => p.value["ack-mode"] || "on-confirm" },
        { label: "Definition", render: (p) => html`<code>${json(p.value)}</code>` },
      ]}
      remove=${(p) => `/parameters/shovel/${enc(p.vhost)}/${enc(p.name)}`}
      add=${(v) => [`/parameters/shovel/${enc(v.vhost)}/${enc(v.name)}`, shovelValue(v)]}
      fields=${html`
        <${Field} label="Virtual host"><${VhostSelect} vhosts=${vhosts} /></${Field}>
        <${Field} label="Name"><input name="name" required /></${Field}>
        <${Field} label="Source URI"><input name="src-uri" value="amqp://" required /></${Field}>
        <${Field} label="Source queue"><input name="src-queue" /></${Field}>
        <${Field} label="or source exchange"><input name="src-exchange" /></${Field}>
        <${Field} label="Routing key"><input name="src-exchange-key" /></${Field}>
        <${Field} label="Prefetch count"><input name="src-prefetch-count" type="number" placeholder="1000" /></${Field}>
        <${Field} label="Auto-delete"><input name="src-delete-after" value="never"
          placeholder="never, queue-length or a number" /></${Field}>
        <${Field} label="Destination URI"><input name="dest-uri" required placeholder="amqp://user:password@host:5672/vhost" /></${Field}>
        <${Field} label="Destination queue"><input name="dest-queue" /></${Field}>
        <${Field} label="or destination exchange"><input name="dest-exchange" /></${Field}>
        <${Field} label="Routing key"><input name="dest-exchange-key" /></${Field}>
        <${Field} label="Add forwarding headers"><input name="dest-add-forward-headers" type="checkbox" /></${Field}>
        <${Field} label="Reconnect delay (s)"><input name="reconnect-delay" type="number" step="any" placeholder="5" /></${Field}>
        <${Field} label="Acknowledgement mode"><select name="ack-mode">
          <option value="on-confirm">On confirm</option><option value="on-publish">On publish</option>
          <option value="no-ack">No ack</option></select></${Field}>`} />
  </div>`;
}

export function AdminPage({ section, vhosts }) {
  const pages = {
    users: Users, vhosts: Vhosts, permissions: Permissions, policies: Policies, limits: Limits, shovels: Shovels,
  };
  const Shown = pages[section] || Users;
  return html`<div id="admin">
    <h1>Admin</h1>
    <nav class="sub">${SECTIONS.map(([key, label]) => html`<a href=${`#/admin/${key}`}
      class=${section === key ? "active" : ""}>${label}</a>`)}</nav>
    <${Shown} vhosts=${vhosts} />
  </div>`;
}
