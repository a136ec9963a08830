// Leveret management page: polls /api/overview, /api/queues and /api/exchanges with the
// page's credentials (HTTP basic auth) and renders them. No external resources.
//
// Credentials come from the login form and are kept in sessionStorage for the tab. For
// automation (headless browsers, kiosk screens) they may also be given in the URL
// fragment, which is never sent to the server: /#username=guest&password=guest
// (optionally &interval=SECONDS).
"use strict";

(function () {
  const STORE = "leveret.credentials";
  const HISTORY = 60;
  let intervalMs = 5000;
  let timer = null;
  let previous = null; // {at, publish, deliver_get, ack} from the last overview
  const samples = []; // [{publish, deliver, ack, ready}]

  const $ = (id) => document.getElementById(id);

  function credentialsFromFragment() {
    const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    const seconds = Number(params.get("interval"));
    if (seconds > 0) intervalMs = seconds * 1000;
    const user = params.get("username");
    if (user === null) return null;
    const creds = { username: user, password: params.get("password") || "" };
    try {
      window.history.replaceState(null, "", window.location.pathname);
    } catch (e) {
      /* not fatal */
    }
    return creds;
  }

  function saved() {
    try {
      return JSON.parse(sessionStorage.getItem(STORE) || "null");
    } catch (e) {
      return null;
    }
  }

  function save(creds) {
    try {
      if (creds) sessionStorage.setItem(STORE, JSON.stringify(creds));
      else sessionStorage.removeItem(STORE);
    } catch (e) {
      /* storage may be unavailable (opaque origins); keep it in memory only */
    }
  }

  let credentials = null;

  function authHeader() {
    const text = credentials.username + ":" + credentials.password;
    const bytes = new TextEncoder().encode(text);
    let binary = "";
    bytes.forEach((b) => { binary += String.fromCharCode(b); });
    return "Basic " + btoa(binary);
  }

  async function api(path) {
    const response = await fetch(path, {
      headers: {
        Authorization: authHeader(),
        Accept: "application/json",
        // The server then leaves out WWW-Authenticate, so no browser dialog pops up.
        "X-Requested-With": "XMLHttpRequest",
      },
      cache: "no-store",
    });
    if (response.status === 401) {
      let reason = "login failed";
      try { reason = (await response.json()).reason || reason; } catch (e) { /* empty */ }
      throw Object.assign(new Error(reason), { unauthorised: true });
    }
    if (!response.ok) throw new Error(path + ": HTTP " + response.status);
    return response.json();
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => {
      if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    });
    (children || []).forEach((c) => node.appendChild(c));
    return node;
  }

  function rate(stats, name) {
    const d = stats && stats[name + "_details"];
    return d && typeof d.rate === "number" ? d.rate : 0;
  }

  function fmt(n) {
    if (typeof n !== "number") return "";
    return Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(1);
  }

  function features(item) {
    const tags = [];
    if (item.durable) tags.push("D");
    if (item.auto_delete) tags.push("AD");
    if (item.exclusive) tags.push("Excl");
    if (item.internal) tags.push("I");
    Object.keys(item.arguments || {}).forEach((k) => tags.push(k.replace(/^x-/, "")));
    return el("td", {}, tags.map((t) => el("span", { class: "tag", text: t })));
  }

  function fill(tbody, rows, columns, emptyText) {
    tbody.replaceChildren();
    if (rows.length === 0) {
      tbody.appendChild(el("tr", { class: "empty" },
        [el("td", { colspan: String(columns), text: emptyText })]));
      return;
    }
    rows.forEach((r) => tbody.appendChild(r));
  }

  function renderOverview(o) {
    $("node").textContent = o.node + " · " + o.product_name + " " + o.product_version +
      " (RabbitMQ " + o.rabbitmq_version + " API)";
    const t = o.object_totals || {};
    const q = o.queue_totals || {};
    const now = Date.now() / 1000;
    const stats = o.message_stats || {};
    // Rates from the counters between two polls (the server's own rates lag by up to 5 s).
    let rates = {
      publish: rate(stats, "publish"), deliver: rate(stats, "deliver_get"), ack: rate(stats, "ack"),
    };
    if (previous && now > previous.at) {
      const dt = now - previous.at;
      rates = {
        publish: Math.max(0, (stats.publish - previous.publish) / dt),
        deliver: Math.max(0, (stats.deliver_get - previous.deliver_get) / dt),
        ack: Math.max(0, (stats.ack - previous.ack) / dt),
      };
    }
    previous = { at: now, publish: stats.publish || 0, deliver_get: stats.deliver_get || 0,
      ack: stats.ack || 0 };
    samples.push({ ...rates, ready: q.messages_ready || 0 });
    while (samples.length > HISTORY) samples.shift();
    const cards = [
      ["Connections", t.connections], ["Channels", t.channels], ["Queues", t.queues],
      ["Exchanges", t.exchanges], ["Consumers", t.consumers], ["Ready", q.messages_ready],
      ["Unacked", q.messages_unacknowledged], ["Publish/s", rates.publish],
      ["Deliver/s", rates.deliver], ["Ack/s", rates.ack],
    ];
    $("totals").replaceChildren(...cards.map(([label, value]) => el("div", { class: "card" }, [
      el("div", { class: "value", text: fmt(value || 0) }),
      el("div", { class: "label", text: label }),
    ])));
    drawChart();
  }

  function drawChart() {
    const canvas = $("chart");
    const ctx = canvas.getContext("2d");
    const w = canvas.width;
    const h = canvas.height;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#e3e6ea";
    ctx.lineWidth = 1;
    for (let i = 1; i < 4; i++) {
      ctx.beginPath();
      ctx.moveTo(0, (h * i) / 4);
      ctx.lineTo(w, (h * i) / 4);
      ctx.stroke();
    }
    const styles = getComputedStyle(document.documentElement);
    const series = [["publish", "--publish"], ["deliver", "--deliver"], ["ack", "--ack"],
      ["ready", "--ready"]];
    const max = Math.max(1, ...samples.flatMap((p) => series.map(([k]) => p[k])));
    series.forEach(([key, colour]) => {
      ctx.strokeStyle = styles.getPropertyValue(colour).trim() || "#333";
      ctx.lineWidth = 2;
      ctx.beginPath();
      samples.forEach((p, i) => {
        const x = samples.length === 1 ? w : (i * w) / (HISTORY - 1);
        const y = h - 6 - ((h - 12) * p[key]) / max;
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
    });
    ctx.fillStyle = "#6b7280";
    ctx.font = "11px sans-serif";
    ctx.fillText("max " + fmt(max), w - 70, h - 8);
  }

  function renderQueues(queues) {
    $("queue-count").textContent = "(" + queues.length + ")";
    const rows = queues.map((q) => {
      const s = q.message_stats || {};
      return el("tr", { "data-queue": q.name }, [
        el("td", { text: q.vhost }),
        el("td", { class: "name", text: q.name }),
        features(q),
        el("td", { text: q.state || "" }),
        el("td", { class: "num", text: fmt(q.consumers) }),
        el("td", { class: "num", text: fmt(q.messages_ready) }),
        el("td", { class: "num", text: fmt(q.messages_unacknowledged) }),
        el("td", { class: "num", text: fmt(q.messages) }),
        el("td", { class: "num", text: fmt(rate(s, "publish")) }),
        el("td", { class: "num", text: fmt(rate(s, "deliver_get")) }),
        el("td", { class: "num", text: fmt(rate(s, "ack")) }),
      ]);
    });
    fill($("queues").tBodies[0], rows, 11, "no queues");
  }

  function renderExchanges(exchanges) {
    $("exchange-count").textContent = "(" + exchanges.length + ")";
    const rows = exchanges.map((x) => el("tr", { "data-exchange": x.name }, [
      el("td", { text: x.vhost }),
      el("td", { class: "name", text: x.name === "" ? "(AMQP default)" : x.name }),
      el("td", { text: x.type }),
      features(x),
    ]));
    fill($("exchanges").tBodies[0], rows, 4, "no exchanges");
  }

  async function poll() {
    try {
      const [overview, queues, exchanges] = await Promise.all([
        api("api/overview"), api("api/queues"), api("api/exchanges"),
      ]);
      renderOverview(overview);
      renderQueues(queues);
      renderExchanges(exchanges);
      $("status").textContent = "user " + credentials.username + " · updated " +
        new Date().toLocaleTimeString("en-GB");
    } catch (err) {
      if (err.unauthorised) {
        logout(err.message);
        return;
      }
      $("status").textContent = "error: " + err.message;
    }
  }

  function start() {
    $("login").hidden = true;
    $("dashboard").hidden = false;
    poll();
    if (timer) clearInterval(timer);
    timer = setInterval(poll, intervalMs);
  }

  function logout(message) {
    if (timer) clearInterval(timer);
    timer = null;
    credentials = null;
    save(null);
    $("dashboard").hidden = true;
    $("login").hidden = false;
    $("status").textContent = "not logged in";
    $("login-error").textContent = message || "";
  }

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    credentials = { username: $("username").value, password: $("password").value };
    save(credentials);
    start();
  });

  $("logout").addEventListener("click", (event) => {
    event.preventDefault();
    logout("");
  });

  credentials = credentialsFromFragment() || saved();
  if (credentials) {
    save(credentials);
    start();
  } else {
    logout("");
  }
})();
