// Form helpers: run an API action, then say what happened (RabbitMQ's wording where its
// UI has one) or show the API's reason for refusing it.
import { useState } from "preact/hooks";
import { ArgRows } from "./args.js";
import { html } from "./lib.js";

// [run, status]: ``run(action, message)`` awaits ``action()``; ``message`` may be a
// function of its result. ``onDone`` (e.g. a list's reload) runs after a success.
export function useAction(onDone) {
  const [status, setStatus] = useState(null);
  const run = async (action, message) => {
    setStatus({ busy: true, text: "..." });
    try {
      const result = await action();
      const text = typeof message === "function" ? message(result) : message;
      setStatus({ ok: true, text, result });
      if (onDone) onDone(result);
      return result;
    } catch (error) {
      setStatus({ ok: false, text: error.message });
      return undefined;
    }
  };
  return [run, status];
}

export function Status({ status }) {
  if (!status || !status.text) return null;
  const kind = status.busy ? "muted" : status.ok ? "ok" : "error";
  return html`<p class=${`status ${kind}`} role="status">${status.text}</p>`;
}

// Values of a form's named fields (checkboxes as booleans).
export function formValues(form) {
  const values = {};
  for (const element of form.elements) {
    if (!element.name) continue;
    values[element.name] = element.type === "checkbox" ? element.checked : element.value;
  }
  return values;
}

// A form whose submit calls ``onSubmit(values, form)`` without leaving the page.
export function Form({ name, onSubmit, children }) {
  const submit = (event) => {
    event.preventDefault();
    onSubmit(formValues(event.target), event.target);
  };
  return html`<form class="action" name=${name} onSubmit=${submit}>${children}</form>`;
}

export function Field({ label, children }) {
  return html`<label class="field"><span>${label}</span>${children}</label>`;
}

// A select of [value, text] options, labelled.
export function Choice({ label, name, options }) {
  return html`<${Field} label=${label}><select name=${name}>
    ${options.map(([value, text]) => html`<option value=${value}>${text}</option>`)}
  </select></${Field}>`;
}

const NO_YES = [["false", "No"], ["true", "Yes"]];

// The fields every declaration form has: virtual host, name (then ``children``),
// durability, auto delete (then ``extra``) and arguments (typed rows, args.js;
// ``shortcuts``: the argument keys offered with their types).
export function DeclareFields({ vhosts, vhost, children, extra, shortcuts }) {
  return html`
    <${Field} label="Virtual host"><${VhostSelect} vhosts=${vhosts} value=${vhost || "/"} /></${Field}>
    <${Field} label="Name"><input name="name" required /></${Field}>
    ${children}
    <${Choice} label="Durability" name="durable" options=${[["true", "Durable"], ["false", "Transient"]]} />
    <${Choice} label="Auto delete" name="auto_delete" options=${NO_YES} />
    ${extra}
    <${ArgRows} name="arguments" label="Arguments" shortcuts=${shortcuts || []}
      keys=${(shortcuts || []).map(([key]) => key)} />`;
}

export { NO_YES };

export function VhostSelect({ vhosts, name = "vhost", value }) {
  return html`<select name=${name} value=${value}>
    ${(vhosts || []).map((v) => html`<option value=${v.name}>${v.name}</option>`)}
  </select>`;
}

// Confirm before something that cannot be undone (RabbitMQ's UI asks the same).
export function confirmed(text = "Are you sure? This object cannot be recovered after deletion.") {
  return window.confirm(text);
}
