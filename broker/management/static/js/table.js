// Tables: a plain one, and a paged list that asks the API for one page at a time (page,
// page_size, name, use_regex, sort, sort_reverse, columns), as RabbitMQ's UI does, so a
// broker with thousands of queues sends a page, not all of them.
import { useState } from "preact/hooks";
import { enc, get, html, usePoll } from "./lib.js";

export function Table({ columns, rows, rowKey, empty = "... no items ..." }) {
  if (!rows || !rows.length) return html`<p class="muted">${empty}</p>`;
  return html`<table class="list">
    <thead><tr>${columns.map((c) => html`<th>${c.label}</th>`)}</tr></thead>
    <tbody>${rows.map(
      (row, i) => html`<tr key=${rowKey ? rowKey(row) : i}>
        ${columns.map((c) => html`<td class=${c.num ? "num" : ""}>${c.render(row)}</td>`)}
      </tr>`,
    )}</tbody>
  </table>`;
}

// Label and value rows of one object's details (rows may be false: left out).
export function Facts({ rows }) {
  return html`<table class="facts">${rows.filter(Boolean).map(([label, value]) => html`
    <tr><th>${label}</th><td>${value}</td></tr>`)}</table>`;
}

const PAGE_SIZES = [20, 50, 100, 500];

// A list the API does not page (a vhost's connections and channels, as in RabbitMQ
// 3.10.8) shown as one page, filtered here.
function onePage(items, filter, regex) {
  let test = (name) => name.toLowerCase().includes(filter.toLowerCase());
  if (regex) {
    try {
      const pattern = new RegExp(filter);
      test = (name) => pattern.test(name);
    } catch {
      test = () => false;
    }
  }
  const found = filter ? items.filter((i) => test(String(i.name))) : items;
  return { items: found, filtered_count: found.length, total_count: items.length, page_count: 1 };
}

// ``path``: the list endpoint ("/queues"); ``vhost``: "" for all; ``columns``: [{label,
// sort (a field the API sorts on), num, render}]; ``fields``: the API's columns parameter.
export function PagedList({ path, vhost, columns, fields, noun, rowKey }) {
  const [page, setPage] = useState(1);
  const [size, setSize] = useState(100);
  const [filter, setFilter] = useState("");
  const [regex, setRegex] = useState(false);
  const [sort, setSort] = useState({ field: "name", reverse: false });
  const query = new URLSearchParams({
    page: String(page),
    page_size: String(size),
    name: filter,
    use_regex: String(regex),
    sort: sort.field,
    sort_reverse: String(sort.reverse),
    columns: fields,
  });
  const base = typeof path === "function" ? path(vhost) : `${path}${vhost ? `/${enc(vhost)}` : ""}`;
  const url = `${base}?${query}`;
  const polled = usePoll(() => get(url), [url]);
  const data = Array.isArray(polled.data) ? onePage(polled.data, filter, regex) : polled.data;
  const error = polled.error;
  const toggle = (field) =>
    setSort((s) => ({ field, reverse: s.field === field ? !s.reverse : false }));
  const pages = data ? Math.max(1, data.page_count) : 1;
  const go = (p) => setPage(Math.min(Math.max(1, p), pages));
  const arrow = (field) => (sort.field === field ? (sort.reverse ? " ▼" : " ▲") : "");
  return html`<div class="paged" data-list=${noun}>
    <div class="controls">
      <label>Page <button type="button" onClick=${() => go(page - 1)} disabled=${page <= 1}
        aria-label="previous page">‹</button>
        <select aria-label="page" value=${page} onChange=${(e) => go(Number(e.target.value))}>
          ${Array.from({ length: pages }, (_, i) => html`<option value=${i + 1}>${i + 1}</option>`)}
        </select>
        <button type="button" onClick=${() => go(page + 1)} disabled=${page >= pages}
          aria-label="next page">›</button> of ${pages}</label>
      <label>Filter: <input name="filter" value=${filter}
        onInput=${(e) => { setFilter(e.target.value); setPage(1); }} /></label>
      <label><input type="checkbox" name="regex" checked=${regex}
        onChange=${(e) => { setRegex(e.target.checked); setPage(1); }} /> Regex</label>
      <label>Displaying <select name="page_size" value=${size}
        onChange=${(e) => { setSize(Number(e.target.value)); setPage(1); }}>
        ${PAGE_SIZES.map((n) => html`<option value=${n}>${n}</option>`)}
      </select> items per page</label>
      ${data && html`<span class="count">${data.filtered_count} of ${data.total_count} ${noun}
        ${data.filtered_count !== data.total_count ? "(filtered)" : ""}</span>`}
    </div>
    ${error && html`<p class="error">${error.message}</p>`}
    ${data && html`<table class="list">
      <thead><tr>${columns.map((c) => (c.sort
        ? html`<th class="sortable" onClick=${() => toggle(c.sort)}>${c.label}${arrow(c.sort)}</th>`
        : html`<th>${c.label}</th>`))}</tr></thead>
      <tbody>${data.items.map((item) => html`<tr key=${rowKey(item)}>
        ${columns.map((c) => html`<td class=${c.num ? "num" : ""}>${c.render(item)}</td>`)}
      </tr>`)}</tbody>
    </table>`}
    ${data && !data.items.length && html`<p class="muted">... no ${noun} ...</p>`}
  </div>`;
}
