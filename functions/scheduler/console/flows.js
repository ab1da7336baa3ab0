// The Flows page: the tenant's flow-control keys (GET /v1/flow-controls) with their limits and live state, and one
// key's view (GET /v1/flow-controls/{key}). docs/flow-control.md says what each figure means.
import { html, useState, useEffect } from "./vendor/htm-preact-standalone-3.1.1.mjs";
import { call, enc } from "./api.js";

const REFRESH_MS = 5000;

const fmt = (iso) => (iso ? new Date(iso).toISOString().replace(".000Z", "Z").replace("T", " ") : "—");
const count = (n) => (n === null || n === undefined ? "—" : String(n));

// A key's limits as people read them: "50 per 1 s, 10 at once, backlog ≤ 5000".
export function limitsText(limits) {
  if (!limits) return "—";
  const parts = [];
  if (limits.rate !== null && limits.rate !== undefined) parts.push(`${limits.rate} per ${limits.period_seconds || 1} s`);
  if (limits.parallelism !== null && limits.parallelism !== undefined) parts.push(`${limits.parallelism} at once`);
  if (limits.max_backlog !== null && limits.max_backlog !== undefined) parts.push(`backlog ≤ ${limits.max_backlog}`);
  return parts.join(", ") || "—";
}

// The link to a key's entry on the Flows page.
export const flowHref = (key) => `#/flows/${enc(key)}`;

const lateness = (s) => (s ? `${s.toFixed(1)} s` : "0 s");
const factor = (f) => (f === null || f === undefined ? "—" : f >= 1 ? "1 (all of its rate)" : `${f} (backed off)`);
const paused = (until) => (until ? `until ${fmt(until)}` : "no");

// Reads `load` now and every REFRESH_MS while the page is open: the figures move.
function useLive(load, deps) {
  const [tick, setTick] = useState(0);
  const [state, setState] = useState({ data: null, error: null, loading: true });
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, error: null, loading: false }),
      (error) => live && setState((s) => ({ data: s.data, error, loading: false })),
    );
    return () => { live = false; };
  }, [...deps, tick]);
  useEffect(() => {
    const timer = setInterval(() => setTick((t) => t + 1), REFRESH_MS);
    return () => clearInterval(timer);
  }, deps);
  return [state, () => setTick((t) => t + 1)];
}

function KeyRow({ k }) {
  return html`<tr data-key=${k.key}>
    <th scope="row"><a href=${flowHref(k.key)}>${k.key}</a></th>
    <td>${limitsText(k)}</td>
    <td class="num">${count(k.backlog)}</td>
    <td class="num">${count(k.in_flight)}</td>
    <td class="num">${count(k.rate_last_minute)}/s</td>
    <td class="num">${lateness(k.oldest_held_lateness_seconds)}</td>
    <td class="num">${factor(k.rate_factor)}</td>
    <td>${paused(k.paused_until)}</td>
  </tr>`;
}

export function Flows() {
  const [state, reload] = useLive(() => call("GET", "/v1/flow-controls"), []);
  const keys = state.data?.keys || [];
  return html`<main id="main">
    <h1>Flow-control keys</h1>
    <p class="note">Each key caps how fast the calls of your jobs that name it start, and how many run at once; an
      occurrence it holds back starts later, never dropped. Refreshes every ${REFRESH_MS / 1000} s.</p>
    <button onClick=${reload} disabled=${state.loading}>Refresh</button>
    ${state.error ? html`<p class="error" role="alert">${state.error.message}</p>` : null}
    ${state.data && !keys.length
      ? html`<p class="note" id="no-keys">No key yet: a job with <code>flow_control</code>, or
          <code>PUT /v1/flow-controls/{key}</code>, makes one.</p>`
      : null}
    ${keys.length
      ? html`<table aria-label="flow-control keys">
          <thead><tr><th scope="col">Key</th><th scope="col">Limits</th><th scope="col">Backlog</th>
            <th scope="col">In flight</th><th scope="col">Rate, last minute</th><th scope="col">Oldest held, late by</th>
            <th scope="col">Rate factor</th><th scope="col">Paused</th></tr></thead>
          <tbody>${keys.map((k) => html`<${KeyRow} key=${k.key} k=${k} />`)}</tbody>
        </table>`
      : null}
    <p class="note" aria-live="polite">${state.data ? `${keys.length} key(s)` : state.loading ? "Loading…" : ""}</p>
  </main>`;
}

export function FlowKey({ flowKey }) {
  const [state, reload] = useLive(() => call("GET", `/v1/flow-controls/${enc(flowKey)}`), [flowKey]);
  const k = state.data;
  return html`<main id="main">
    <p><a href="#/flows">← Flows</a></p>
    <h1>Flow-control key <code>${flowKey}</code></h1>
    <button onClick=${reload} disabled=${state.loading}>Refresh</button>
    ${state.error ? html`<p class="error" role="alert">${state.error.message}</p>` : null}
    ${k
      ? html`<dl class="facts" id="flow-key">
          <dt>Limits</dt><dd>${limitsText(k)}</dd>
          <dt>Rate</dt><dd>${k.rate === null ? "none" : `${k.rate} calls per ${k.period_seconds} s`}</dd>
          <dt>Parallelism</dt><dd>${k.parallelism === null ? "none" : `${k.parallelism} calls at once`}</dd>
          <dt>Max backlog</dt><dd>${k.max_backlog === null ? "none" : `${k.max_backlog} occurrences`}</dd>
          <dt>Set at</dt><dd>${fmt(k.updated_at)}</dd>
          <dt>Backlog</dt><dd id="flow-backlog">${count(k.backlog)}
            <span class="note"> (occurrences held by its rate, their release still to come)</span></dd>
          <dt>In flight</dt><dd id="flow-in-flight">${count(k.in_flight)}</dd>
          <dt>Rate, last minute</dt><dd>${count(k.rate_last_minute)} releases a second</dd>
          <dt>Oldest held</dt><dd>late by ${lateness(k.oldest_held_lateness_seconds)}</dd>
          <dt>Rate factor</dt><dd>${factor(k.rate_factor)}
            <span class="note"> (halved by each 429 or 503 of the destination, recovering by 1 % of its rate a
              second)</span></dd>
          <dt>Paused</dt><dd id="flow-paused">${paused(k.paused_until)}</dd>
        </dl>`
      : null}
    <p class="note" aria-live="polite">${state.loading && !k ? "Loading…" : ""}</p>
  </main>`;
}
