// The few things every page uses: Preact with htm (templates without a build step),
// the HTTP API client, number and time formats, and polling.
import { h } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import htm from "htm";

export const html = htm.bind(h);
export const enc = encodeURIComponent;

const AUTH_KEY = "leveret-auth";
const REFRESH_KEY = "leveret-refresh";

export function credentials() {
  return sessionStorage.getItem(AUTH_KEY);
}

export function setCredentials(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  sessionStorage.setItem(AUTH_KEY, btoa(String.fromCharCode(...bytes)));
}

export function forgetCredentials() {
  sessionStorage.removeItem(AUTH_KEY);
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.reason || body.error)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// Listeners told when the API refuses the stored credentials (back to the login page).
const unauthorised = new Set();
export function onUnauthorised(listener) {
  unauthorised.add(listener);
  return () => unauthorised.delete(listener);
}

// One call of the HTTP API. X-Requested-With keeps the browser's own login dialog away
// (the API then leaves out WWW-Authenticate, as app.py says).
export async function api(method, path, body, extraHeaders = {}, auth = credentials()) {
  const headers = { "X-Requested-With": "XMLHttpRequest", ...extraHeaders };
  if (auth) headers.Authorization = `Basic ${auth}`;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = typeof body === "string" ? body : JSON.stringify(body);
  }
  const response = await fetch(`api${path}`, { method, headers, body: payload });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { reason: text };
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    // Credentials no longer good (user deleted, password changed): back to the login.
    if (response.status === 401 && data && data.error === "not_authorized") {
      unauthorised.forEach((listener) => listener(error));
    }
    throw error;
  }
  return data;
}

export const get = (path) => api("GET", path);

export function refreshInterval() {
  return Number(localStorage.getItem(REFRESH_KEY) || 5000);
}

export function setRefreshInterval(ms) {
  localStorage.setItem(REFRESH_KEY, String(ms));
}

// Load with ``load`` now, again every refresh interval while the tab is visible, and on
// ``reload()`` (after an action). The previous data stays shown while a new load runs.
export function usePoll(load, deps) {
  const [state, setState] = useState({ data: null, error: null });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    const run = () =>
      load().then(
        (data) => live && setState({ data, error: null }),
        (error) => live && setState((s) => ({ data: s.data, error })),
      );
    run();
    const every = refreshInterval();
    const timer = every > 0 ? setInterval(() => document.hidden || run(), every) : null;
    return () => {
      live = false;
      if (timer) clearInterval(timer);
    };
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

export function fmtNum(n) {
  if (n === undefined || n === null) return "";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 });
}

export function fmtRate(details) {
  const rate = details && details.rate;
  return rate === undefined ? "" : `${fmtNum(rate)}/s`;
}

export function fmtBytes(n) {
  if (n === undefined || n === null) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

export function fmtDuration(ms) {
  if (ms === undefined || ms === null) return "?";
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const hours = Math.floor(s / 3600);
  s -= hours * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (d) return `${d}d ${hours}h`;
  if (hours) return `${hours}h ${m}m`;
  return `${m}m ${s}s`;
}

export function json(value) {
  return JSON.stringify(value);
}

// A JSON object typed in a form field: {} when empty, an Error naming the field if bad.
export function parseObject(text, field) {
  if (!text || !text.trim()) return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`${field}: not valid JSON`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(`${field}: must be a JSON object`);
  }
  return value;
}

// Link targets of the object pages (hash routes, names percent-encoded).
export const links = {
  queue: (vhost, name) => `#/queues/${enc(vhost)}/${enc(name)}`,
  exchange: (vhost, name) => `#/exchanges/${enc(vhost)}/${enc(name || "amq.default")}`,
  connection: (name) => `#/connections/${enc(name)}`,
  channel: (name) => `#/channels/${enc(name)}`,
};
