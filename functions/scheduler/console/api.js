// The API client of the console: the same origin that serves the console, signed with a local bearer token or
// with SigV4 (the user's own AWS credentials, as every other API caller signs). Credentials live in
// sessionStorage only: they leave with the tab.
import { AwsClient } from "./vendor/aws4fetch-1.0.20.mjs";

const KEY = "punctual.console.credentials";

// The API's base: the console is served at <base>/console/ (API Gateway puts the stage, e.g. /prod, before it).
export const apiBase = location.origin + location.pathname.replace(/\/console(\/.*)?$/, "");

export function loadCredentials() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY) || "null");
  } catch {
    return null;
  }
}

export function saveCredentials(credentials) {
  if (credentials) sessionStorage.setItem(KEY, JSON.stringify(credentials));
  else sessionStorage.removeItem(KEY);
}

// An API error: the problem+json body's title and detail, so a page can show the API's own explanation.
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

let signer = null;
let signerFor = null;

async function send(credentials, method, url, body, headers) {
  const init = { method, headers: { Accept: "application/json", ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (credentials.mode === "sigv4") {
    if (signerFor !== credentials) {
      signer = new AwsClient({
        accessKeyId: credentials.accessKeyId,
        secretAccessKey: credentials.secretAccessKey,
        sessionToken: credentials.sessionToken || undefined,
        region: credentials.region,
        service: "execute-api",
        retries: 0,
      });
      signerFor = credentials;
    }
    return signer.fetch(url, init);
  }
  init.headers.Authorization = `Bearer ${credentials.token}`;
  return fetch(url, init);
}

// One API call: the parsed JSON body, or an ApiError carrying the problem+json the API answered. `headers` are sent
// (and signed) besides Accept and Content-Type, e.g. an Idempotency-Key. A request that gets no answer (the network,
// a timeout) rejects with the fetch's TypeError, not an ApiError.
export async function call(method, path, body, { headers } = {}) {
  const credentials = loadCredentials();
  if (!credentials) throw new ApiError(401, { detail: "sign in first" });
  const response = await send(credentials, method, apiBase + path, body, headers);
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { detail: text.slice(0, 200) };
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed;
}

// What this deployment's API offers, read from its own OpenAPI document: a control whose route is missing is
// hidden, never imitated.
export async function features() {
  const doc = await call("GET", "/v1/openapi.json");
  const paths = doc.paths || {};
  const listParameters = (paths["/v1/jobs"]?.get?.parameters || []).map((p) => p.name);
  const retryPath = Object.keys(paths).find((p) => /^\/v1\/jobs\/\{[^}]+\}\/runs\/\{[^}]+\}[/:]retry$/.test(p));
  return {
    labelFilter: listParameters.includes("label"),
    namePrefix: listParameters.includes("name_prefix"),
    targetTypeFilter: listParameters.includes("target_type"),
    byExternalId: Object.keys(paths).some((p) => p.startsWith("/v1/jobs/by-external-id/")),
    retryPath: retryPath || null,
    bulk: paths["/v1/jobs/bulk"]?.post ? "/v1/jobs/bulk" : null,
    operator: Boolean(paths["/v1/operator/status"]?.get),
    flowControl: Boolean(paths["/v1/flow-controls"]?.get),
  };
}

export const enc = encodeURIComponent;

// A route template of the OpenAPI document filled in from `values` by parameter name ({job_id}, {scheduled_for}...).
export function fill(template, values) {
  return template.replace(/\{([^}]+)\}/g, (_, name) => enc(values[name] ?? ""));
}
