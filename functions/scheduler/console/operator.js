// The Operator page: every lane's load and the dispatch lag (GET /v1/operator/status), for the tenants the
// deployment lists in its `operators` setting. It holds the load of every tenant's work together and no job of any.
import { html, useState, useEffect } from "./vendor/htm-preact-standalone-3.1.1.mjs";
import { call, ApiError } from "./api.js";

const REFRESH_MS = 10000;
const NOT_OPERATOR = "this principal is not an operator";

const fmt = (iso) => (iso ? new Date(iso).toISOString().replace(".000Z", "Z").replace("T", " ") : "—");
const count = (n) => (n === null || n === undefined ? "—" : String(n));

// A duration in seconds as people read it; null: the source does not know.
function duration(s, unknown = "unknown") {
  if (s === null || s === undefined) return unknown;
  const whole = Math.round(s);
  if (whole < 120) return `${whole} s`;
  if (whole < 7200) return `${Math.floor(whole / 60)} min ${whole % 60} s`;
  return `${Math.floor(whole / 3600)} h ${Math.floor((whole % 3600) / 60)} min`;
}

function QueueRow({ name, queue, depth }) {
  return html`<tr data-lane=${name}>
    <th scope="row">${name}</th>
    <td><code>${queue || "—"}</code></td>
    <td class="num">${count(depth?.visible)}</td>
    <td class="num">${count(depth?.in_flight)}</td>
    <td class="num">${count(depth?.delayed)}</td>
    <td class="num">${depth ? duration(depth.oldest_age_seconds, "n/a") : "—"}</td>
  </tr>`;
}

function Lanes({ status }) {
  return html`<table id="lanes">
    <caption>Ready queues by lane, and the dead-letter queue they share</caption>
    <thead><tr><th scope="col">Lane</th><th scope="col">Queue</th><th scope="col">Visible</th>
      <th scope="col">In flight</th><th scope="col">Delayed</th><th scope="col">Oldest message</th></tr></thead>
    <tbody>
      ${status.lanes.map((l) => html`<${QueueRow} key=${l.lane} name=${l.lane} queue=${l.queue} depth=${l} />`)}
      <${QueueRow} name="dead letters" queue="(shared by every lane)" depth=${status.dead_letter_queue} />
    </tbody>
    <tfoot><${QueueRow} name="all lanes" queue="" depth=${status.ready_queue} /></tfoot>
  </table>`;
}

function Lag({ status }) {
  const hour = Math.round(status.window_seconds / 60);
  return html`<dl class="facts" id="lag">
    <dt>Watermark</dt><dd>${status.watermark ? fmt(status.watermark) : "none yet (the sweeper has not run)"}</dd>
    <dt>Dispatch lag</dt><dd id="dispatch-lag">${duration(status.dispatch_lag_seconds)}
      <span class="note"> (the watermark behind now; 0 while the sweeper is ahead)</span></dd>
    <dt>Largest lag, last ${hour} min</dt><dd id="largest-lag">${duration(status.largest_lag_seconds)}
      <span class="note"> (the sweeper's DispatchLagSeconds metric)</span></dd>
    <dt>Checked at</dt><dd>${fmt(status.checked_at)}</dd>
  </dl>`;
}

function Recent({ status }) {
  const entries = Object.entries(status.recent || {});
  if (!entries.length) return html`<p class="note">No metrics: ${status.recent_source || "their source could not be read"}.</p>`;
  return html`<table id="recent">
    <caption>Last ${Math.round(status.window_seconds / 60)} minutes (${status.recent_source})</caption>
    <thead><tr><th scope="col">Metric</th><th scope="col">Sum</th></tr></thead>
    <tbody>${entries.map(([name, value]) => html`<tr><th scope="row">${name}</th><td class="num">${value}</td></tr>`)}</tbody>
  </table>`;
}

export function Operator() {
  const [tick, setTick] = useState(0);
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const forbidden = state.error instanceof ApiError && state.error.status === 403;
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    call("GET", "/v1/operator/status").then(
      (data) => live && setState({ data, error: null, loading: false }),
      (error) => live && setState({ data: null, error, loading: false }),
    );
    return () => { live = false; };
  }, [tick]);
  // The figures move: the page reads them again every few seconds while it is open (not once refused).
  useEffect(() => {
    if (forbidden) return undefined;
    const timer = setInterval(() => setTick((t) => t + 1), REFRESH_MS);
    return () => clearInterval(timer);
  }, [forbidden]);
  const status = state.data;
  const detail = state.error?.message || "";
  return html`<main id="main">
    <h1>Operator: lanes and lag</h1>
    <p class="note">Every lane's load and the dispatch lag, the figures of <code>punctual status</code>: the work of
      every tenant together, and no job of any. Refreshes every ${REFRESH_MS / 1000} s.</p>
    <button onClick=${() => setTick((t) => t + 1)} disabled=${state.loading}>Refresh</button>
    ${forbidden
      ? html`<p class="error" role="alert" id="not-operator">${NOT_OPERATOR}: ${detail.replace(`${NOT_OPERATOR}: `, "")}</p>`
      : state.error ? html`<p class="error" role="alert">${detail}</p>` : null}
    ${status
      ? html`<h2>Lanes</h2>
        <${Lanes} status=${status} />
        <h2>Lag</h2>
        <${Lag} status=${status} />
        <h2>Failures and retries</h2>
        <${Recent} status=${status} />
        ${status.notes.length || status.problems.length
          ? html`<h2>What could not be told</h2><ul id="status-notes">
              ${status.notes.map((n) => html`<li class="note">${n}</li>`)}
              ${status.problems.map((p) => html`<li class="error">could not read ${p}</li>`)}</ul>`
          : null}`
      : null}
    <p class="note" aria-live="polite">${state.loading ? "Loading…" : status ? `Read at ${fmt(status.checked_at)}` : ""}</p>
  </main>`;
}
