// The gateway's JSON API, with the API key the user entered (kept in this tab's
// sessionStorage: closing the tab forgets it). The console holds no data of its own.

const KEY = "o.apiKey";

export class ApiError extends Error {
  constructor(status, detail) {
    super(describe(detail));
    this.status = status;
    this.detail = detail;
  }
}

// FastAPI's `detail`: a sentence, or a list of {loc, msg} for a request it refused.
export function describe(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((d) => (d && d.msg ? `${(d.loc || []).filter((p) => p !== "body").join(".")}: ${d.msg}` : JSON.stringify(d)))
      .join("; ");
  }
  return JSON.stringify(detail);
}

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const key = apiKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `the gateway cannot be reached: ${err.message}`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!response.ok) {
    const detail = data && typeof data === "object" && "detail" in data ? data.detail : text || response.statusText;
    throw new ApiError(response.status, detail);
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body = {}) => api("POST", path, body);
export const patch = (path, body) => api("PATCH", path, body);
export const put = (path, body) => api("PUT", path, body);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    for (const item of Array.isArray(v) ? v : [v]) q.append(k, item);
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}
