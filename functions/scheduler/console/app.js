// The punctual console: Preact + htm (vendored, no build step), hash routes, every number from the tenant API.
import { html, render, useState, useEffect, useCallback, useRef } from "./vendor/htm-preact-standalone-3.1.1.mjs";
import { call, features, loadCredentials, saveCredentials, enc, fill, ApiError } from "./api.js";
import { BulkBar } from "./bulk.js";
import { Operator } from "./operator.js";
import { Flows, FlowKey, flowHref, limitsText } from "./flows.js";

// ---- small pieces --------------------------------------------------------------------------------------------

const fmt = (iso) => (iso ? new Date(iso).toISOString().replace(".000Z", "Z").replace("T", " ") : "—");
const seconds = (a, b) => (a && b ? (new Date(b) - new Date(a)) / 1000 : null);
const dur = (s) => (s === null ? "—" : s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`);

const State = ({ value }) => (value ? html`<span class=${`state ${value}`}>${value}</span>` : "—");
const Labels = ({ labels }) =>
  Object.entries(labels || {}).map(([k, v]) => html`<span class="label">${k}=${v}</span>`);
const Problem = ({ error }) => (error ? html`<p class="error" role="alert">${error.message}</p>` : null);

function scheduleText(schedule) {
  if (!schedule) return "—";
  if (schedule.type === "cron") return `cron ${schedule.expression} (${schedule.timezone || "UTC"})`;
  if (schedule.type === "rate") return `every ${schedule.every_seconds} s`;
  return schedule.at ? `once at ${fmt(schedule.at)}` : `once, ${schedule.delay_seconds} s after creation`;
}

// When a run started (its first claim: the ledger item's creation), its fencing token (the highest claim epoch in
// its history), how late it started, and how long it took from its first claim to its end.
function runFacts(run) {
  const steps = run.history || [];
  const started = run.created_at || steps.find((h) => h.state === "RUNNING")?.at || null;
  const fencing = steps.reduce((m, h) => Math.max(m, h.epoch || 0), 0) || null;
  return {
    started,
    fencing,
    lateness: seconds(run.scheduled_for, started),
    duration: seconds(started, run.finished_at),
  };
}

// A bar chart as SVG, with the same numbers in a table for screen readers.
function BarChart({ title, points, unit, id }) {
  const width = 720, height = 180, pad = 24;
  const max = Math.max(1, ...points.map((p) => p.value));
  const bar = Math.min(40, (width - 2 * pad) / Math.max(points.length, 1));
  return html`<figure>
    <svg class="chart" id=${id} viewBox=${`0 0 ${width} ${height}`} role="img" aria-label=${title}>
      <text x=${pad} y="14">${title} (max ${max} ${unit})</text>
      ${points.map((p, i) => {
        const h = ((height - 2 * pad) * p.value) / max;
        return html`<rect class=${`bar ${p.late ? "late" : ""}`} x=${pad + i * bar} y=${height - pad - h}
          width=${Math.max(bar - 1, 1)} height=${h}><title>${p.label}: ${p.value} ${unit}</title></rect>`;
      })}
      <text x=${pad} y=${height - 6}>${points[0]?.label || ""}</text>
      <text x=${width - pad} y=${height - 6} text-anchor="end">${points.at(-1)?.label || ""}</text>
    </svg>
    <figcaption>${title}</figcaption>
    <div class="visually-hidden"><table><caption>${title}</caption>
      <tbody>${points.map((p) => html`<tr><th scope="row">${p.label}</th><td>${p.value} ${unit}</td></tr>`)}</tbody>
    </table></div>
  </figure>`;
}

function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const reload = useCallback(() => {
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => setState({ data, error: null, loading: false }),
      (error) => setState({ data: null, error, loading: false }),
    );
  }, deps);
  useEffect(reload, [reload]);
  return [state, reload];
}

// ---- sign in ---------------------------------------------------------------------------------------------------

function SignIn({ onSignedIn }) {
  const local = ["127.0.0.1", "localhost"].includes(location.hostname);
  const [mode, setMode] = useState(local ? "token" : "sigv4");
  const [error, setError] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    const f = new FormData(event.target);
    const credentials =
      mode === "token"
        ? { mode, token: f.get("token").trim() }
        : {
            mode,
            accessKeyId: f.get("accessKeyId").trim(),
            secretAccessKey: f.get("secretAccessKey").trim(),
            sessionToken: f.get("sessionToken").trim(),
            region: f.get("region").trim(),
          };
    saveCredentials(credentials);
    try {
      onSignedIn(await features());
    } catch (e) {
      saveCredentials(null);
      setError(e);
    }
  };
  return html`<main id="main">
    <h1>Sign in</h1>
    <p class="note">Credentials stay in this tab (sessionStorage) and sign each request to the API; the API shows
      you only your own jobs.</p>
    <form onSubmit=${submit} aria-label="sign in">
      <fieldset>
        <legend>How to sign</legend>
        <label><span><input type="radio" name="mode" checked=${mode === "token"} onChange=${() => setMode("token")} />
          Bearer token (the local stack's SCHEDULER_DEV_TOKENS)</span></label>
        <label><span><input type="radio" name="mode" checked=${mode === "sigv4"} onChange=${() => setMode("sigv4")} />
          AWS credentials (SigV4; short-lived ones from <code>aws configure export-credentials</code>)</span></label>
      </fieldset>
      ${mode === "token"
        ? html`<fieldset><label>Token <input name="token" id="token" type="password" required autocomplete="off" /></label></fieldset>`
        : html`<fieldset>
            <label>Access key id <input name="accessKeyId" required autocomplete="off" /></label>
            <label>Secret access key <input name="secretAccessKey" type="password" required autocomplete="off" /></label>
            <label>Session token <input name="sessionToken" type="password" autocomplete="off" /></label>
            <label>Region <input name="region" required placeholder="eu-west-1" /></label>
          </fieldset>`}
      <button class="primary" type="submit">Sign in</button>
    </form>
    <${Problem} error=${error} />
  </main>`;
}

// ---- jobs list -------------------------------------------------------------------------------------------------

function Jobs({ features: f, query }) {
  const params = new URLSearchParams(query);
  const [jobs, setJobs] = useState([]);
  const [cursor, setCursor] = useState(null);
  const [error, setError] = useState(null);
  const [loading, setLoading] = useState(true);
  const [search, setSearch] = useState(params.get("name") || "");
  // What the label field shows: what was typed, kept across the list's re-renders, until the URL's filter changes.
  const [labelText, setLabelText] = useState(params.getAll("label").join(" "));
  const loads = useRef(0);
  useEffect(() => setLabelText(params.getAll("label").join(" ")), [query]);

  const url = (next) => {
    const q = new URLSearchParams({ limit: "50" });
    if (params.get("state")) q.set("state", params.get("state"));
    if (f.labelFilter) params.getAll("label").filter(Boolean).forEach((l) => q.append("label", l));
    if (f.targetTypeFilter && params.get("target_type")) q.set("target_type", params.get("target_type"));
    if (f.namePrefix && params.get("name")) q.set("name_prefix", params.get("name"));
    if (next) q.set("cursor", next);
    return `/v1/jobs?${q}`;
  };
  // Only the newest load's answer is shown: one for an older filter that arrives late is dropped.
  const load = async (next) => {
    const mine = ++loads.current;
    setLoading(true);
    try {
      const page = await call("GET", url(next));
      if (mine !== loads.current) return;
      setJobs((old) => (next ? [...old, ...page.jobs] : page.jobs));
      setCursor(page.next_cursor || null);
      setError(null);
    } catch (e) {
      if (mine !== loads.current) return;
      setError(e);
    }
    setLoading(false);
  };
  useEffect(() => { load(null); }, [query]);

  const apply = (event) => {
    event.preventDefault();
    const fd = new FormData(event.target);
    const q = new URLSearchParams();
    for (const [k, v] of fd.entries()) {
      // Several label selectors (ANDed) are typed apart by spaces or commas: one `label` parameter each.
      const values = k === "label" ? String(v).split(/[\s,]+/) : [String(v).trim()];
      values.filter(Boolean).forEach((value) => q.append(k, value));
    }
    location.hash = `#/jobs?${q}`;
  };
  // Without a server-side name filter, the search narrows the jobs loaded so far (and says so).
  const shown = f.namePrefix ? jobs : jobs.filter((j) => (j.name || "").toLowerCase().includes(search.toLowerCase()));
  return html`<main id="main">
    <h1>Jobs</h1>
    <form class="filters" onSubmit=${apply} role="search" aria-label="filter jobs">
      ${f.labelFilter
        ? html`<label>Label (key:value) <input name="label" id="label-filter" placeholder="customer:42 kind:report"
            value=${labelText} onInput=${(e) => setLabelText(e.target.value)} /></label>`
        : null}
      <label>State
        <select name="state" value=${params.get("state") || ""}>
          ${["", "ACTIVE", "PAUSED", "DISPATCHED", "COMPLETED", "CANCELLED"].map(
            (s) => html`<option value=${s}>${s || "any"}</option>`,
          )}
        </select>
      </label>
      ${f.targetTypeFilter
        ? html`<label>Target type <select name="target_type" value=${params.get("target_type") || ""}>
            ${["", "http", "lambda", "sqs", "sns", "eventbridge", "stepfunctions", "handler"].map(
              (s) => html`<option value=${s}>${s || "any"}</option>`,
            )}</select></label>`
        : null}
      <label>${f.namePrefix ? "Name starts with" : "Name contains (jobs loaded so far)"}
        <input name="name" id="name-filter" value=${search} onInput=${(e) => setSearch(e.target.value)} /></label>
      <button type="submit">Apply</button>
    </form>
    ${f.labelFilter ? null : html`<p class="note">This API has no label filter; labels arrive with a newer API.</p>`}
    <${BulkBar} features=${f} selectors=${params.getAll("label").filter(Boolean)} onDone=${() => load(null)} />
    <${Problem} error=${error} />
    <table aria-label="jobs">
      <thead><tr><th>Name</th><th>State</th><th>Schedule</th><th>Next run</th><th>Last run</th><th>Labels</th></tr></thead>
      <tbody>
        ${shown.map(
          (j) => html`<tr>
            <td><a href=${`#/jobs/${enc(j.job_id)}`}>${j.name || j.job_id}</a></td>
            <td><${State} value=${j.state} /></td>
            <td>${scheduleText(j.schedule)}</td>
            <td>${fmt(j.next_run_at)}</td>
            <td><${State} value=${j.last_run?.state} /></td>
            <td><${Labels} labels=${j.labels} /></td>
          </tr>`,
        )}
      </tbody>
    </table>
    ${!loading && shown.length === 0 ? html`<p class="note">No jobs match.</p>` : null}
    ${cursor ? html`<button onClick=${() => load(cursor)} disabled=${loading}>Load more</button>` : null}
    <p class="note" aria-live="polite">${loading ? "Loading…" : `${shown.length} job(s) shown`}</p>
  </main>`;
}

// ---- one job ---------------------------------------------------------------------------------------------------

function RunRow({ run, job, f, onChanged }) {
  const facts = runFacts(run);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const act = async (method, path, body) => {
    setBusy(true);
    try {
      await call(method, path, body);
      setError(null);
      onChanged();
    } catch (e) {
      setError(e);
    }
    setBusy(false);
  };
  const key = run.occurrence_key;
  const canRetry = f.retryPath && (run.state === "DEAD" || run.state === "RECONCILING");
  return html`<tr data-state=${run.state}>
    <td>${fmt(run.scheduled_for)}${job ? null : html`<br /><a href=${`#/jobs/${enc(run.job_id)}`}>${run.job_name || run.job_id}</a>`}</td>
    <td><${State} value=${run.state} /></td>
    <td class="num">${run.attempts ?? "—"}</td>
    <td class="num">${facts.fencing ?? "—"}</td>
    <td class="num">${dur(facts.lateness)}</td>
    <td class="num">${dur(facts.duration)}</td>
    <td>${run.held ? html`<p class="held">${run.held.detail}</p>` : null}
      ${run.last_error ? html`<code>${run.last_error}</code>` : run.held ? null : "—"}
      ${(run.history || []).length
        ? html`<details><summary>${run.history.length} step(s)</summary><ol>
            ${run.history.map((h) => html`<li>${fmt(h.at)} <${State} value=${h.state} /> token ${h.epoch}
              ${h.error ? html` — <code>${h.error}</code>` : null}</li>`)}
          </ol></details>`
        : null}
      <${Problem} error=${error} /></td>
    <td><div class="actions">
      ${canRetry
        ? html`<button disabled=${busy} aria-label=${`retry run of ${run.scheduled_for}`}
            onClick=${() => act("POST", fill(f.retryPath, { ...run, job_id: run.job_id, occurrence_key: key }))}>Retry</button>`
        : null}
      ${run.state === "RECONCILING"
        ? html`<button disabled=${busy} onClick=${() => act("POST", `/v1/jobs/${enc(run.job_id)}/runs/${enc(key)}/resolve`,
              { outcome: "succeeded", note: "resolved in the console: the target did the work" })}>Resolve: succeeded</button>
            <button disabled=${busy} onClick=${() => act("POST", `/v1/jobs/${enc(run.job_id)}/runs/${enc(key)}/resolve`,
              { outcome: "retry", note: "resolved in the console: run it again" })}>Resolve: run again</button>`
        : null}
    </div></td>
  </tr>`;
}

function RunTable({ runs, job, f, onChanged, label }) {
  return html`<table aria-label=${label}>
    <thead><tr><th>Scheduled for</th><th>State</th><th>Attempts</th><th>Fencing token</th><th>Start lateness</th>
      <th>Duration</th><th>Error and steps</th><th>Actions</th></tr></thead>
    <tbody>${runs.map((r) => html`<${RunRow} key=${r.occurrence_key} run=${r} job=${job} f=${f} onChanged=${onChanged} />`)}</tbody>
  </table>`;
}

function Job({ jobId, features: f }) {
  const [tick, setTick] = useState(0);
  const [state] = useLoad(async () => {
    const [job, runs] = await Promise.all([
      call("GET", `/v1/jobs/${enc(jobId)}?preview=5`),
      call("GET", `/v1/jobs/${enc(jobId)}/runs?limit=50`),
    ]);
    return { job, runs: runs.runs.map((r) => ({ ...r, job_id: jobId })) };
  }, [jobId, tick]);
  const [actionError, setActionError] = useState(null);
  const [message, setMessage] = useState("");
  const refresh = () => setTick((t) => t + 1);
  // Watch: a job page refreshes itself every few seconds while it is open, so a run shows up as it fires.
  useEffect(() => {
    const timer = setInterval(refresh, 3000);
    return () => clearInterval(timer);
  }, []);
  const act = async (what, method, path) => {
    if (what === "cancel" && !confirm("Cancel this job? A cancelled job cannot be resumed.")) return;
    try {
      await call(method, path);
      setActionError(null);
      setMessage(`${what}: done`);
      refresh();
    } catch (e) {
      setActionError(e);
    }
  };
  if (state.error && !state.data) return html`<main id="main"><h1>Job</h1><${Problem} error=${state.error} /></main>`;
  if (!state.data) return html`<main id="main"><p aria-live="polite">Loading…</p></main>`;
  const { job, runs } = state.data;
  const base = `/v1/jobs/${enc(jobId)}`;
  const definition = { ...job };
  const lateness = runs
    .map((r) => ({ label: fmt(r.scheduled_for), value: runFacts(r).lateness }))
    .filter((p) => p.value !== null)
    .reverse()
    .map((p) => ({ ...p, value: Math.round(p.value * 1000) / 1000, late: p.value > 1 }));
  return html`<main id="main">
    <p><a href="#/jobs">← Jobs</a></p>
    <h1>${job.name || job.job_id} <${State} value=${job.state} /></h1>
    <div class="actions" role="group" aria-label="job actions">
      <button onClick=${() => act("pause", "POST", `${base}/pause`)} disabled=${job.state !== "ACTIVE"}>Pause</button>
      <button onClick=${() => act("resume", "POST", `${base}/resume`)} disabled=${job.state !== "PAUSED"}>Resume</button>
      <button onClick=${() => act("trigger", "POST", `${base}/trigger`)} disabled=${job.state === "CANCELLED"}>Trigger now</button>
      <button class="danger" onClick=${() => act("cancel", "DELETE", base)} disabled=${job.state === "CANCELLED"}>Cancel job</button>
    </div>
    <p class="ok" aria-live="polite">${message}</p>
    <${Problem} error=${actionError} />
    <div class="grid2">
      <section aria-labelledby="facts-h">
        <h2 id="facts-h">State</h2>
        <dl class="facts">
          <dt>Job id</dt><dd><code>${job.job_id}</code></dd>
          <dt>Schedule</dt><dd>${scheduleText(job.schedule)}</dd>
          <dt>Target</dt><dd>${job.target?.type} ${job.target?.url || job.target?.arn || ""}</dd>
          <dt>Version</dt><dd>${job.version}</dd>
          <dt>Labels</dt><dd><${Labels} labels=${job.labels} />${job.labels ? null : "—"}</dd>
          ${job.external_id ? html`<dt>External id</dt><dd><code>${job.external_id}</code></dd>` : null}
          ${job.flow_control
            ? html`<dt>Flow control</dt><dd id="job-flow-control">${f.flowControl
                ? html`<a href=${flowHref(job.flow_control.key)}>${job.flow_control.key}</a>`
                : html`<code>${job.flow_control.key}</code>`}: ${limitsText(job.flow_control)}</dd>`
            : null}
          <dt>Last run</dt><dd><${State} value=${job.last_run?.state} /></dd>
          <dt>Next runs</dt><dd><ol id="next-runs">${(job.next_runs || []).map((t) => html`<li>${fmt(t)}</li>`)}</ol>
            ${(job.next_runs || []).length ? null : "none"}</dd>
        </dl>
      </section>
      <section aria-labelledby="lateness-h">
        <h2 id="lateness-h">Start lateness</h2>
        ${lateness.length
          ? html`<${BarChart} id="lateness-chart" title="Start lateness per run (scheduled instant to first attempt; includes jitter)"
              unit="s" points=${lateness} />`
          : html`<p class="note">No run has started yet.</p>`}
      </section>
    </div>
    <h2>Runs</h2>
    ${runs.length ? html`<${RunTable} runs=${runs} job=${job} f=${f} onChanged=${refresh} label="runs" />`
      : html`<p class="note" id="no-runs">No runs yet; this page refreshes every 3 s.</p>`}
    <h2>Definition</h2>
    <pre tabindex="0" aria-label="definition">${JSON.stringify(definition, null, 2)}</pre>
  </main>`;
}

// ---- dead letters and RECONCILING runs ----------------------------------------------------------------------------

// The tenant API has no "runs by state" list: this page reads the runs of the tenant's first jobs (JOBS_SCANNED,
// RUNS_PER_JOB newest runs each), a few at a time, and shows those that wait for a person.
const JOBS_SCANNED = 100;
const RUNS_PER_JOB = 20;

async function scanRuns() {
  const { jobs } = await call("GET", `/v1/jobs?limit=${JOBS_SCANNED}`);
  const runs = [];
  const queue = jobs.filter((j) => j.state !== "CANCELLED");
  const worker = async () => {
    while (queue.length) {
      const job = queue.shift();
      const page = await call("GET", `/v1/jobs/${enc(job.job_id)}/runs?limit=${RUNS_PER_JOB}`);
      for (const r of page.runs) runs.push({ ...r, job_id: job.job_id, job_name: job.name });
    }
  };
  await Promise.all([worker(), worker(), worker()]);
  return { jobs, runs };
}

function Attention({ features: f }) {
  const [tick, setTick] = useState(0);
  const [state] = useLoad(scanRuns, [tick]);
  const waiting = (state.data?.runs || []).filter((r) => r.state === "DEAD" || r.state === "RECONCILING");
  return html`<main id="main">
    <h1>Dead letters and RECONCILING runs</h1>
    <p class="note">Runs of your first ${JOBS_SCANNED} jobs (their newest ${RUNS_PER_JOB} runs each) that wait for
      you. ${f.retryPath ? "Retry runs a DEAD or RECONCILING occurrence once more, under the same key."
        : "This API has no retry route: a DEAD run is redriven by an operator (docs/operations.md)."}${" "}
      Resolve settles a RECONCILING run.</p>
    <button onClick=${() => setTick((t) => t + 1)}>Refresh</button>
    <${Problem} error=${state.error} />
    ${state.loading ? html`<p aria-live="polite">Loading…</p>` : null}
    ${state.data && !waiting.length ? html`<p class="note">Nothing waits for you.</p>` : null}
    ${waiting.length ? html`<${RunTable} runs=${waiting} f=${f} onChanged=${() => setTick((t) => t + 1)} label="runs waiting" />` : null}
  </main>`;
}

// ---- charts ------------------------------------------------------------------------------------------------------

function Charts() {
  const [minutes, setMinutes] = useState(120);
  const [forecast] = useLoad(() => call("GET", `/v1/forecast?minutes=${minutes}`), [minutes]);
  const [scan] = useLoad(scanRuns, []);
  const due = (forecast.data?.minutes || []).map((m) => ({ label: fmt(m.minute).slice(0, 16), value: m.due }));
  const lateness = (scan.data?.runs || [])
    .map((r) => ({ at: r.scheduled_for, value: runFacts(r).lateness }))
    .filter((p) => p.value !== null)
    .sort((a, b) => (a.at < b.at ? -1 : 1))
    .slice(-120)
    .map((p) => ({ label: fmt(p.at), value: Math.round(p.value * 1000) / 1000, late: p.value > 1 }));
  return html`<main id="main">
    <h1>Forecast and lateness</h1>
    <form class="filters" onSubmit=${(e) => e.preventDefault()}>
      <label>Minutes ahead
        <select value=${minutes} onChange=${(e) => setMinutes(Number(e.target.value))}>
          ${[60, 120, 180].map((m) => html`<option value=${m}>${m}</option>`)}
        </select></label>
    </form>
    <${Problem} error=${forecast.error} />
    ${forecast.data
      ? html`<${BarChart} id="forecast-chart" title=${`Occurrences due per minute, next ${minutes} minutes (total ${forecast.data.total}, peak ${forecast.data.peak_due})`}
          unit="due" points=${due} />`
      : html`<p aria-live="polite">Loading…</p>`}
    <h2>Start lateness of recent runs</h2>
    <${Problem} error=${scan.error} />
    ${lateness.length
      ? html`<${BarChart} id="tenant-lateness-chart" title="Start lateness per run, oldest to newest (bars over 1 s in amber)"
          unit="s" points=${lateness} />`
      : html`<p class="note">${scan.loading ? "Loading…" : "No run has started yet."}</p>`}
    <h2>Lanes and lag</h2>
    <p class="note">Every lane's load and the sweep watermark are the operator's view: the <a href="#/operator">Operator</a>
      page for the tenants the deployment lists in <code>operators</code>, else <code>punctual status</code> or the
      CloudWatch dashboard (docs/console.md).</p>
  </main>`;
}

// The skip link moves focus to the page's content (a <main> is not focusable until it gets a tabindex).
function skipToContent(event) {
  event.preventDefault();
  const main = document.getElementById("main");
  main?.setAttribute("tabindex", "-1");
  main?.focus();
}

// ---- shell ---------------------------------------------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#/, "") || "/jobs";
  const [path, query = ""] = hash.split("?");
  const parts = path.split("/").filter(Boolean);
  return { parts, query };
}

function App() {
  const [f, setFeatures] = useState(null);
  const [error, setError] = useState(null);
  const [where, setWhere] = useState(route());
  useEffect(() => {
    const onHash = () => setWhere(route());
    addEventListener("hashchange", onHash);
    if (loadCredentials()) features().then(setFeatures, (e) => {
      if (e instanceof ApiError && (e.status === 401 || e.status === 403)) saveCredentials(null);
      setError(e);
    });
    return () => removeEventListener("hashchange", onHash);
  }, []);
  const signOut = () => {
    saveCredentials(null);
    setFeatures(null);
  };
  const nav = [
    ["jobs", "Jobs"],
    ["attention", "Dead letters"],
    ["charts", "Forecast"],
    ...(f?.flowControl ? [["flows", "Flows"]] : []),
    ...(f?.operator ? [["operator", "Operator"]] : []),
  ];
  const [page, id] = where.parts;
  let body;
  if (!f) body = loadCredentials() && !error ? html`<main id="main"><p>Loading…</p></main>`
    : html`<${SignIn} onSignedIn=${(x) => { setError(null); setFeatures(x); }} />`;
  else if (page === "jobs" && id) body = html`<${Job} jobId=${decodeURIComponent(id)} features=${f} />`;
  else if (page === "attention") body = html`<${Attention} features=${f} />`;
  else if (page === "charts") body = html`<${Charts} />`;
  else if (page === "operator") body = html`<${Operator} />`;
  else if (page === "flows" && id) body = html`<${FlowKey} flowKey=${decodeURIComponent(id)} />`;
  else if (page === "flows") body = html`<${Flows} />`;
  else body = html`<${Jobs} features=${f} query=${where.query} />`;
  return html`<a class="skip" href="#main" onClick=${skipToContent}>Skip to content</a>
    <header>
      <strong>punctual</strong>
      ${f ? html`<nav aria-label="main"><ul>${nav.map(([p, label]) => html`<li><a href=${`#/${p}`}
        aria-current=${(page || "jobs") === p ? "page" : undefined}>${label}</a></li>`)}</ul></nav>
        <span class="who">${loadCredentials()?.mode === "sigv4" ? "signed with AWS credentials" : "bearer token"}</span>
        <button onClick=${signOut}>Sign out</button>` : null}
    </header>
    ${body}`;
}

render(html`<${App} />`, document.getElementById("app"));
