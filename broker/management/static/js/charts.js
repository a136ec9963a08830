// Charts of the broker's rate history (uPlot, vendored as window.uPlot). The API gives
// samples newest first ({"sample", "timestamp"}); counters are turned into rates between
// neighbouring samples, lengths are drawn as they are. Rates and lengths never share an
// axis: each has its own chart.
import { useEffect, useRef, useState } from "preact/hooks";
import { html } from "./lib.js";

const COLOURS = ["#e8590c", "#1c7ed6", "#2f9e44", "#ae3ec9", "#f08c00", "#0ca678", "#c92a2a"];

// The ranges a chart offers, as RabbitMQ's UI offers them (age and increment, seconds).
export const RANGES = {
  "60": { label: "Last minute", age: 60, incr: 5 },
  "600": { label: "Last ten minutes", age: 600, incr: 5 },
};
const RANGE_KEY = "leveret-range";

export function useRange() {
  const [range, setRange] = useState(localStorage.getItem(RANGE_KEY) || "60");
  const choose = (value) => {
    localStorage.setItem(RANGE_KEY, value);
    setRange(value);
  };
  return [RANGES[range] || RANGES["60"], range, choose];
}

// The query string asking the API for the history of ``range`` (``data_rates``: a
// connection's bytes, as RabbitMQ's UI asks for them).
export function rangeQuery(range, kinds = ["lengths", "msg_rates"]) {
  const { age, incr } = range;
  return kinds.map((kind) => `${kind}_age=${age}&${kind}_incr=${incr}`).join("&");
}

export function RangePicker({ value, onChange }) {
  return html`<label class="range">Chart range
    <select value=${value} onChange=${(e) => onChange(e.target.value)}>
      ${Object.entries(RANGES).map(([k, r]) => html`<option value=${k}>${r.label}</option>`)}
    </select></label>`;
}

// [[timestamps in s, oldest first], [values]...] for the named *_details of ``source``.
function columns(source, names, asRates) {
  const present = names.filter(([key]) => source && source[`${key}_details`]?.samples?.length);
  if (!present.length) return null;
  const first = source[`${present[0][0]}_details`].samples.slice().reverse();
  const xs = first.map((s) => s.timestamp / 1000);
  const series = present.map(([key]) => {
    const samples = source[`${key}_details`].samples.slice().reverse();
    if (!asRates) return samples.map((s) => s.sample);
    return samples.map((s, i) => {
      if (i === 0) return null;
      const previous = samples[i - 1];
      const seconds = (s.timestamp - previous.timestamp) / 1000;
      return seconds > 0 ? Math.max(0, (s.sample - previous.sample) / seconds) : null;
    });
  });
  return { data: [xs, ...series], labels: present.map(([, label]) => label) };
}

// A time chart of ``names`` ([key, label] pairs) of ``source`` (message_stats or an object
// with messages_details...); ``rates``: the samples are counters, draw their rates.
export function HistoryChart({ title, source, names, rates = false, unit, age = 60, digits }) {
  const box = useRef(null);
  const made = columns(source, names, rates);
  const key = made ? JSON.stringify(made.data) : "";
  useEffect(() => {
    if (!made || !box.current || !window.uPlot) return undefined;
    const width = Math.max(320, box.current.clientWidth || 600);
    const opts = {
      width,
      height: 180,
      legend: { show: true },
      scales: {
        // The whole range shown even while the history is shorter (just started).
        x: { time: true, range: (u, min, max) => [max - age, max] },
        y: { range: (u, min, max) => [0, Math.max(rates ? 1 : 5, max * 1.1)] },
      },
      axes: [{}, { label: unit, size: 60 }],
      series: [
        {},
        ...made.labels.map((label, i) => ({
          label,
          stroke: COLOURS[i % COLOURS.length],
          width: 2,
          value: (u, v) => (v === null || v === undefined ? "-" : v.toFixed(digits ?? (rates ? 1 : 0))),
        })),
      ],
    };
    const chart = new window.uPlot(opts, made.data, box.current);
    return () => chart.destroy();
  }, [key, age]);
  return html`<div class="chart">
    <h3>${title}</h3>
    ${made ? html`<div class="plot" ref=${box} data-chart=${title}></div>`
           : html`<p class="muted">No history yet.</p>`}
  </div>`;
}

export const QUEUED = [
  ["messages_ready", "Ready"],
  ["messages_unacknowledged", "Unacked"],
  ["messages", "Total"],
];

export const QUEUE_RATES = [
  ["publish", "Publish"],
  ["deliver_get", "Deliver / get"],
  ["redeliver", "Redelivered"],
  ["ack", "Consumer ack"],
  ["get_empty", "Get (empty)"],
];

export const OVERVIEW_RATES = [
  ["publish", "Publish"],
  ["confirm", "Publisher confirm"],
  ["deliver_get", "Deliver / get"],
  ["redeliver", "Redelivered"],
  ["ack", "Consumer ack"],
  ["drop_unroutable", "Unroutable (drop)"],
  ["return_unroutable", "Unroutable (return)"],
];

export const EXCHANGE_RATES = [
  ["publish_in", "Publish (In)"],
  ["publish_out", "Publish (Out)"],
];

// A channel's message rates (rabbit_mgmt_format's channel stats, as RabbitMQ's channel page).
export const CHANNEL_RATES = [
  ["publish", "Publish"],
  ["confirm", "Publisher confirm"],
  ["deliver", "Deliver (manual ack)"],
  ["deliver_no_ack", "Deliver (auto ack)"],
  ["get", "Get (manual ack)"],
  ["get_no_ack", "Get (auto ack)"],
  ["redeliver", "Redelivered"],
  ["ack", "Consumer ack"],
  ["return_unroutable", "Unroutable (return)"],
  ["drop_unroutable", "Unroutable (drop)"],
];

// A connection's data rates (its socket's bytes received and sent).
export const CONNECTION_RATES = [
  ["recv_oct", "Received"],
  ["send_oct", "Sent"],
];
