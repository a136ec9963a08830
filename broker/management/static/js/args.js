// Arguments, headers and properties typed as RabbitMQ's management UI types them: rows of
// key = value with a type (String, Number, Boolean, List), a new empty row appearing as
// the last one is filled. The rows travel in a hidden input (JSON of the raw rows) so the
// forms keep reading plain values; ``typedRows`` turns them into the object the API takes,
// each value of its type (an x-max-length of "10" as Number is sent as the integer 10).
import { useState } from "preact/hooks";
import { html } from "./lib.js";

export const TYPES = [["string", "String"], ["number", "Number"], ["boolean", "Boolean"], ["list", "List"]];

const empty = (type) => ({ key: "", value: "", type });

// One value of a row, typed; ``what`` names the field in an error.
function typed(row, what) {
  const text = row.value.trim();
  switch (row.type) {
    case "number": {
      const number = Number(text);
      if (text === "" || !Number.isFinite(number)) throw new Error(`${what} ${row.key}: not a number`);
      return number;
    }
    case "boolean":
      if (text !== "true" && text !== "false") throw new Error(`${what} ${row.key}: true or false`);
      return text === "true";
    case "list":
      // A JSON array as it is, else comma-separated strings (RabbitMQ's UI: one per row).
      if (text.startsWith("[")) {
        try {
          const list = JSON.parse(text);
          if (Array.isArray(list)) return list;
        } catch {
          // fall through to the comma-separated reading
        }
      }
      return text === "" ? [] : text.split(",").map((item) => item.trim());
    default:
      return row.value;
  }
}

// The object of a rows field's value (the hidden input's JSON); rows without a key are
// left out. ``numeric``: keys whose value is a number whatever the row says (properties).
export function typedRows(raw, what, numeric = []) {
  const rows = raw ? JSON.parse(raw) : [];
  const found = {};
  for (const row of rows) {
    if (!row.key.trim()) continue;
    found[row.key.trim()] = typed(numeric.includes(row.key.trim()) ? { ...row, type: "number" } : row, what);
  }
  return found;
}

// Rows of key / value (/ type) named ``name``; ``keys`` suggests keys (a datalist), and
// ``shortcuts`` ([key, type] pairs) add a row with that key, as RabbitMQ's "Add" links do.
export function ArgRows({ name, label, types = true, keys = [], shortcuts = [], defaultType = "string" }) {
  const [rows, setRows] = useState([empty(defaultType)]);
  const change = (index, field, value) => {
    const next = rows.map((row, i) => (i === index ? { ...row, [field]: value } : row));
    const last = next[next.length - 1];
    if (last.key || last.value) next.push(empty(defaultType));
    setRows(next);
  };
  const add = (key, type) => {
    const filled = rows.filter((row) => row.key || row.value);
    setRows([...filled, { key, value: "", type }, empty(defaultType)]);
  };
  const list = `${name}-keys`;
  return html`<div class="field rows" data-rows=${name}>
    <span>${label}</span>
    <div>
      <input type="hidden" name=${name} value=${JSON.stringify(rows)} />
      ${keys.length ? html`<datalist id=${list}>${keys.map((k) => html`<option value=${k} />`)}</datalist>` : ""}
      ${rows.map((row, i) => html`<div class="row" data-row=${i}>
        <input class="key" aria-label=${`${label} key`} list=${keys.length ? list : undefined}
          value=${row.key} onInput=${(e) => change(i, "key", e.target.value)} />
        <span>=</span>
        <input class="value" aria-label=${`${label} value`} value=${row.value}
          onInput=${(e) => change(i, "value", e.target.value)} />
        ${types && html`<select class="type" aria-label=${`${label} type`} value=${row.type}
          onChange=${(e) => change(i, "type", e.target.value)}>
          ${TYPES.map(([value, text]) => html`<option value=${value}>${text}</option>`)}
        </select>`}
      </div>`)}
      ${shortcuts.length ? html`<p class="shortcuts muted">Add ${shortcuts.map(([key, type]) => html`<button
        type="button" class="link" onClick=${() => add(key, type)}>${key}</button> `)}</p>` : ""}
    </div>
  </div>`;
}

// Queue arguments RabbitMQ's "Add a new queue" form offers, with their types.
export const QUEUE_ARGUMENTS = [
  ["x-message-ttl", "number"], ["x-expires", "number"], ["x-max-length", "number"],
  ["x-max-length-bytes", "number"], ["x-overflow", "string"], ["x-dead-letter-exchange", "string"],
  ["x-dead-letter-routing-key", "string"], ["x-max-priority", "number"],
  ["x-single-active-consumer", "boolean"], ["x-queue-mode", "string"],
];
export const EXCHANGE_ARGUMENTS = [["alternate-exchange", "string"]];
// Message properties (their names in the API's publish body) and the numeric ones.
export const PROPERTIES = [
  "content_type", "content_encoding", "priority", "correlation_id", "reply_to", "expiration",
  "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id",
];
export const NUMERIC_PROPERTIES = ["priority", "timestamp"];
