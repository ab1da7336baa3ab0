// The jobs page's bulk bar: pause, resume or cancel every job matching the list's label selector as one operation
// of the API (`POST /v1/jobs/bulk`). One Idempotency-Key per click names the operation: a request that got no answer
// (the network, a 5xx, a 429) is sent again with the same key, so it goes on with that operation and never starts a
// second one; a 202 (the request's time was up) is sent again to go on, until the API answers 200 with the report.
import { html, useState } from "./vendor/htm-preact-standalone-3.1.1.mjs";
import { call, enc, ApiError } from "./api.js";

// Failed requests in a row (no answer, a 5xx, a 429) sent again before the bar gives up, as the CLI does.
const RETRIES = 10;
const DOING = { pause: "Pausing", resume: "Resuming", cancel: "Cancelling" };
const DONE = { pause: "Pause", resume: "Resume", cancel: "Cancel" };

// The bulk selector for the list's label filter: `key:value` is the label key with that value, `key:` the key with
// any value, as the list reads them. Null when there is none, or when one is not of that shape or names a key twice
// (the bulk body is a map, so it could not say what the list says).
export function bulkSelector(selectors) {
  const labels = {};
  for (const selector of selectors) {
    const colon = selector.indexOf(":");
    if (colon <= 0) return null;
    const key = selector.slice(0, colon);
    if (key in labels) return null;
    labels[key] = selector.slice(colon + 1);
  }
  return Object.keys(labels).length ? labels : null;
}

// A fresh Idempotency-Key (getRandomValues, unlike randomUUID, also exists outside a secure context).
function idempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `console-bulk-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const transient = (error) => !(error instanceof ApiError) || error.status >= 500 || error.status === 429;

// Sends the bulk request until the operation is DONE; `onProgress` hears each answer and each retry.
async function runBulk(path, action, labels, onProgress) {
  const key = idempotencyKey();
  let failures = 0;
  for (;;) {
    let report;
    try {
      report = await call("POST", path, { action, selector: { labels } }, { headers: { "Idempotency-Key": key } });
    } catch (error) {
      if (!transient(error)) throw error;
      failures += 1;
      if (failures > RETRIES) {
        throw new Error(`the API did not answer ${RETRIES + 1} times in a row (${error.message}); the jobs changed ` +
          "so far stay changed, and the same action again goes on with the rest");
      }
      onProgress({ retry: failures, reason: error.message });
      await sleep(Math.min(1000 * failures, 10_000));
      continue;
    }
    failures = 0;
    onProgress({ report });
    if (report.state === "DONE") return report;
  }
}

function Result({ report, text }) {
  const failed = report.failed || [];
  return html`<p>${DONE[report.action]} of the jobs matching ${text} finished: ${report.matched} matched,
      ${" "}${report.changed} changed, ${report.unchanged} already so, ${failed.length} could not be changed.</p>
    ${failed.length
      ? html`<ul class="failed">${failed.map((f) => html`<li><a href=${`#/jobs/${enc(f.job_id)}`}>${f.job_id}</a>:
          ${" "}${f.reason}</li>`)}</ul>`
      : null}`;
}

export function BulkBar({ features: f, selectors, onDone }) {
  const [running, setRunning] = useState(false);
  const [progress, setProgress] = useState(null);
  const [report, setReport] = useState(null);
  const [error, setError] = useState(null);
  const labels = bulkSelector(selectors);
  if (!f.bulk || !f.labelFilter || !labels) return null;
  const text = selectors.join(" ");

  const start = async (action) => {
    if (action === "cancel" && !confirm(`Cancel every job matching ${text}? A cancelled job cannot be resumed.`)) return;
    setRunning(true);
    setReport(null);
    setError(null);
    setProgress({ action, text });
    try {
      setReport({ text, ...(await runBulk(f.bulk, action, labels, (p) => setProgress({ action, text, ...p }))) });
    } catch (e) {
      setError(e);
    }
    setProgress(null);
    setRunning(false);
    onDone?.();
  };

  let status = "";
  if (progress?.retry) {
    status = `${DOING[progress.action]}: no answer (${progress.reason}); sending it again as the same operation ` +
      `(${progress.retry} of ${RETRIES})…`;
  } else if (progress?.report) {
    status = `${DOING[progress.action]}: ${progress.report.processed} / ${progress.report.matched} done…`;
  } else if (progress) {
    status = `${DOING[progress.action]} the jobs matching ${progress.text}…`;
  }
  return html`<section class="bulk" aria-labelledby="bulk-h">
    <h2 id="bulk-h">Every job matching <code>${text}</code></h2>
    <p class="note" id="bulk-note">Acts on all the jobs with these labels, whatever their state or name, not only
      those loaded below; as one operation of the API.</p>
    <div class="actions" role="group" aria-label=${`bulk actions on the jobs matching ${text}`}
      aria-describedby="bulk-note">
      <button disabled=${running} onClick=${() => start("pause")}>Pause all matching</button>
      <button disabled=${running} onClick=${() => start("resume")}>Resume all matching</button>
      <button class="danger" disabled=${running} onClick=${() => start("cancel")}>Cancel all matching</button>
    </div>
    <div id="bulk-progress" role="status" aria-live="polite">
      ${status ? html`<p>${status}</p>` : null}
      ${progress?.report
        ? html`<progress max=${progress.report.matched || 1} value=${progress.report.processed}
            aria-label="jobs done"></progress>`
        : null}
      ${report ? html`<${Result} report=${report} text=${report.text} />` : null}
    </div>
    ${error ? html`<p class="error" role="alert">${error.message}</p>` : null}
  </section>`;
}
