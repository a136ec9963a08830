// The overview: totals, queued messages and message rates (two charts, two axes: counts
// and rates never share one), node health, listeners, definitions export and import.
import { useState } from "preact/hooks";
import { HistoryChart, OVERVIEW_RATES, QUEUED, RangePicker, rangeQuery, useRange } from "./charts.js";
import { useAction, Status } from "./forms.js";
import { api, enc, fmtBytes, fmtDuration, fmtNum, get, html, usePoll } from "./lib.js";

function Totals({ overview }) {
  const totals = overview.object_totals || {};
  const queued = overview.queue_totals || {};
  const cells = [
    ["Connections", totals.connections, "#/connections"],
    ["Channels", totals.channels, "#/channels"],
    ["Exchanges", totals.exchanges, "#/exchanges"],
    ["Queues", totals.queues, "#/queues"],
    ["Consumers", totals.consumers, null],
    ["Ready", queued.messages_ready, null],
    ["Unacked", queued.messages_unacknowledged, null],
    ["Total messages", queued.messages, null],
  ];
  return html`<div class="totals">${cells.map(([label, value, href]) => html`
    <div class="total" data-total=${label}>
      <span class="value">${fmtNum(value || 0)}</span>
      ${href ? html`<a href=${href}>${label}</a>` : html`<span>${label}</span>`}
    </div>`)}</div>`;
}

// A used-against-limit bar: red past the limit (memory) or below it (disk).
function Gauge({ label, used, limit, format, alarm, lowIsBad = false }) {
  if (used === undefined) return html`<tr><th>${label}</th><td class="muted">not reported</td></tr>`;
  const share = limit ? Math.min(1, lowIsBad ? limit / Math.max(used, 1) : used / limit) : 0;
  return html`<tr data-gauge=${label}>
    <th>${label}</th>
    <td>
      <div class=${`bar ${alarm ? "alarm" : ""}`}><div style=${`width:${(share * 100).toFixed(1)}%`}></div></div>
      <span>${format(used)}${limit !== undefined ? html` ${lowIsBad ? "free, limit" : "of"} ${format(limit)}` : ""}</span>
      ${alarm ? html` <b class="error">alarm</b>` : ""}
    </td>
  </tr>`;
}

function Node({ node }) {
  return html`<table class="facts node" id="node-health">
    <tr><th>Node</th><td>${node.name} ${node.running ? "(running)" : ""}</td></tr>
    <${Gauge} label="Memory" used=${node.mem_used} limit=${node.mem_limit}
      format=${fmtBytes} alarm=${node.mem_alarm} />
    <${Gauge} label="Disk space" used=${node.disk_free} limit=${node.disk_free_limit}
      format=${fmtBytes} alarm=${node.disk_free_alarm} lowIsBad=${true} />
    <${Gauge} label="File descriptors" used=${node.fd_used} limit=${node.fd_total} format=${fmtNum} />
    <${Gauge} label="Socket descriptors" used=${node.sockets_used} limit=${node.sockets_total}
      format=${fmtNum} />
    <tr><th>Uptime</th><td>${node.uptime !== undefined ? fmtDuration(node.uptime) : "not reported"}</td></tr>
    ${node.processors !== undefined && html`<tr><th>Processors</th><td>${node.processors}</td></tr>`}
  </table>`;
}

function Definitions({ vhosts }) {
  const [exportVhost, setExportVhost] = useState("");
  const [run, status] = useAction();
  const download = () => run(async () => {
    const path = exportVhost ? `/definitions/${enc(exportVhost)}` : "/definitions";
    const data = await get(path);
    const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = `leveret_definitions${exportVhost ? `_${exportVhost}` : ""}.json`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  }, "Definitions downloaded.");
  const upload = (event) => {
    event.preventDefault();
    const file = event.target.file.files[0];
    const vhost = event.target.vhost.value;
    if (!file) return;
    run(async () => {
      const text = await file.text();
      await api("POST", vhost ? `/definitions/${enc(vhost)}` : "/definitions", text);
    }, "Your definitions were imported successfully.");
  };
  return html`<section id="definitions">
    <h2>Export definitions</h2>
    <div class="action">
      <label>Virtual host <select value=${exportVhost} onChange=${(e) => setExportVhost(e.target.value)}>
        <option value="">All</option>
        ${vhosts.map((v) => html`<option value=${v.name}>${v.name}</option>`)}</select></label>
      <button type="button" onClick=${download}>Download broker definitions</button>
    </div>
    <h2>Import definitions</h2>
    <form class="action" name="import" onSubmit=${upload}>
      <label>Definitions file <input type="file" name="file" accept=".json,application/json" /></label>
      <label>Virtual host <select name="vhost"><option value="">All</option>
        ${vhosts.map((v) => html`<option value=${v.name}>${v.name}</option>`)}</select></label>
      <button type="submit">Upload broker definitions</button>
    </form>
    <${Status} status=${status} />
  </section>`;
}

export function Overview({ vhosts }) {
  const [range, rangeKey, setRange] = useRange();
  const overview = usePoll(() => get(`/overview?${rangeQuery(range)}`), [rangeKey]);
  const nodes = usePoll(() => get("/nodes"), []);
  const data = overview.data;
  return html`<div id="overview">
    <h1>Overview</h1>
    ${overview.error && html`<p class="error">${overview.error.message}</p>`}
    ${data && html`<div>
      <${Totals} overview=${data} />
      <${RangePicker} value=${rangeKey} onChange=${setRange} />
      <div class="charts">
        <${HistoryChart} age=${range.age} title="Queued messages" source=${data.queue_totals} names=${QUEUED}
          unit="messages" />
        <${HistoryChart} age=${range.age} title="Message rates" source=${data.message_stats}
          names=${OVERVIEW_RATES} rates=${true} unit="msg/s" />
      </div>
    </div>`}
    <h2>Node</h2>
    ${nodes.data && nodes.data.map((node) => html`<${Node} node=${node} />`)}
    ${data && html`<h2>Ports and contexts</h2>
      <table class="list" id="listeners">
        <thead><tr><th>Protocol</th><th>Bound to</th><th>Port</th></tr></thead>
        <tbody>${data.listeners.map((l) => html`<tr>
          <td>${l.protocol}</td><td>${l.ip_address}</td><td>${l.port}</td></tr>`)}</tbody>
      </table>
      <p class="muted">${data.product_name} ${data.product_version} (${data.leveret_build}), RabbitMQ ${data.rabbitmq_version} behaviour</p>`}
    <${Definitions} vhosts=${vhosts} />
  </div>`;
}
