// The management UI: a login page, then a header with the tabs, the virtual host selector
// and the refresh interval, and one page per route (hash routes, as RabbitMQ's UI has).
// Every figure and every action goes through the HTTP API.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import {
  api, credentials, forgetCredentials, get, html, onUnauthorised, refreshInterval,
  setCredentials, setRefreshInterval,
} from "./lib.js";
import { Overview } from "./overview.js";
import { ChannelsPage, ConnectionsPage, ExchangesPage, QueuesPage } from "./lists.js";
import { ExchangePage, QueuePage } from "./objects.js";
import { ChannelPage, ConnectionPage } from "./clients.js";
import { AdminPage } from "./admin.js";

const TABS = [
  ["", "Overview"],
  ["connections", "Connections"],
  ["channels", "Channels"],
  ["exchanges", "Exchanges"],
  ["queues", "Queues"],
  ["admin", "Admin"],
];

// RabbitMQ's UI shows the Admin tab to administrators only (policymakers see policies,
// which the Admin page also lists for them).
function isAdmin(user) {
  const tags = user.tags || [];
  return tags.includes("administrator") || tags.includes("policymaker");
}

function useRoute() {
  const read = () => location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [route, setRoute] = useState(read());
  useEffect(() => {
    const changed = () => setRoute(read());
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return route;
}

function Login({ onLogin }) {
  const [failed, setFailed] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    const form = event.target;
    setCredentials(form.username.value, form.password.value);
    try {
      onLogin(await api("GET", "/whoami"));
    } catch {
      // RabbitMQ's UI says no more than this, whatever the API's reason (main.js).
      forgetCredentials();
      setFailed(true);
    }
  };
  return html`<main class="login">
    <h1><span class="logo">Leveret</span> Management</h1>
    <form id="login" onSubmit=${submit}>
      <label>Username: <input name="username" autocomplete="username" required /></label>
      <label>Password: <input name="password" type="password"
        autocomplete="current-password" /></label>
      <button type="submit">Login</button>
      ${failed && html`<p class="error" id="login-status">Login failed</p>`}
    </form>
  </main>`;
}

function Header({ user, route, vhosts, vhost, setVhost, logout }) {
  const [every, setEvery] = useState(refreshInterval());
  const chooseEvery = (value) => {
    setRefreshInterval(value);
    setEvery(value);
    location.reload();
  };
  return html`<header>
    <div class="top">
      <span class="logo">Leveret</span>
      <span class="muted">${user.cluster}</span>
      <span class="user">User <b id="whoami">${user.name}</b>
        <button type="button" class="link" onClick=${logout}>Log out</button></span>
    </div>
    <nav>
      ${TABS.filter(([path]) => path !== "admin" || isAdmin(user)).map(([path, label]) => html`<a href=${`#/${path}`}
        class=${(route[0] || "") === path ? "active" : ""}>${label}</a>`)}
      <span class="spacer"></span>
      <label>Virtual host <select name="vhost-filter" value=${vhost}
        onChange=${(e) => setVhost(e.target.value)}>
        <option value="">All</option>
        ${vhosts.map((v) => html`<option value=${v.name}>${v.name}</option>`)}
      </select></label>
      <label>Refresh <select value=${every} onChange=${(e) => chooseEvery(Number(e.target.value))}>
        ${[[5000, "every 5 s"], [10000, "every 10 s"], [30000, "every 30 s"], [0, "never"]]
          .map(([ms, text]) => html`<option value=${ms}>${text}</option>`)}
      </select></label>
    </nav>
  </header>`;
}

function Page({ route, vhost, vhosts, user }) {
  const [tab, a, b] = route;
  const props = { vhost, vhosts, user };
  switch (tab || "") {
    case "":
      return html`<${Overview} ...${props} />`;
    case "connections":
      return a ? html`<${ConnectionPage} name=${a} />` : html`<${ConnectionsPage} ...${props} />`;
    case "channels":
      return a ? html`<${ChannelPage} name=${a} />` : html`<${ChannelsPage} ...${props} />`;
    case "exchanges":
      return a !== undefined && b !== undefined
        ? html`<${ExchangePage} ...${props} vhost=${a} name=${b} />`
        : html`<${ExchangesPage} ...${props} />`;
    case "queues":
      return a !== undefined && b !== undefined
        ? html`<${QueuePage} ...${props} vhost=${a} name=${b} />`
        : html`<${QueuesPage} ...${props} />`;
    case "admin":
      return html`<${AdminPage} section=${a || "users"} ...${props} />`;
    default:
      return html`<p class="error">Not found: ${location.hash}</p>`;
  }
}

function App() {
  const [user, setUser] = useState(null);
  const [checked, setChecked] = useState(false);
  const [vhosts, setVhosts] = useState([]);
  const [vhost, setVhostState] = useState(sessionStorage.getItem("leveret-vhost") || "");
  const route = useRoute();
  const setVhost = (name) => {
    sessionStorage.setItem("leveret-vhost", name);
    setVhostState(name);
  };
  const logout = () => {
    forgetCredentials();
    setUser(null);
  };
  useEffect(() => onUnauthorised(logout), []);
  useEffect(() => {
    if (!credentials()) {
      setChecked(true);
      return;
    }
    get("/whoami").then(setUser, () => forgetCredentials()).finally(() => setChecked(true));
  }, []);
  useEffect(() => {
    if (!user) return;
    get("/vhosts?columns=name").then(setVhosts, () => setVhosts([]));
    get("/cluster-name").then((c) => setUser((u) => ({ ...u, cluster: c.name })), () => {});
  }, [user && user.name, route[0]]);
  if (!checked) return html`<p class="muted">Loading...</p>`;
  if (!user) return html`<${Login} onLogin=${setUser} />`;
  return html`<div>
    <${Header} user=${user} route=${route} vhosts=${vhosts} vhost=${vhost}
      setVhost=${setVhost} logout=${logout} />
    <main id="page"><${Page} route=${route} vhost=${vhost} vhosts=${vhosts} user=${user} /></main>
  </div>`;
}

render(html`<${App} />`, document.getElementById("app"));
