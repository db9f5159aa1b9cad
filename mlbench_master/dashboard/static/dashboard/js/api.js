// The one way the dashboard talks to the master: fetch() against the REST API with the
// browser's session cookie and Django's CSRF token on every request that changes something.

export class ApiError extends Error {
  constructor(status, data) {
    super(errorText(data) || `HTTP ${status}`);
    this.status = status;
    this.data = data;
  }
}

function errorText(data) {
  if (!data) return "";
  if (typeof data === "string") return data;
  return data.detail || data.message || data.error || "";
}

// Aborted when the user signs out, so no request still under way answers 401 on the way out.
const pageRequests = new AbortController();
document.addEventListener("submit", (event) => {
  if (event.target.matches("form[data-sign-out]")) pageRequests.abort();
});

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

// `file`: a File (a result bundle) sent as the body itself, never as a form.
export async function api(path, { method = "GET", body, params, file, type = "application/zip" } = {}) {
  const headers = { Accept: "application/json" };
  const opts = { method, headers, credentials: "same-origin", signal: pageRequests.signal };
  if (method !== "GET" && method !== "HEAD") headers["X-CSRFToken"] = csrfToken();
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  if (file !== undefined) {
    headers["Content-Type"] = type;
    opts.body = file;
  }
  const res = await fetch(path + query(params), opts);
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

// List endpoints may be paginated ({results: [...]}) or plain arrays.
export function rows(data) {
  if (Array.isArray(data)) return data;
  return (data && data.results) || [];
}

// Call fn now and every `ms` after it finishes, pausing while the tab is hidden.
export function every(ms, fn) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    timer = null;
    if (stopped || pageRequests.signal.aborted) return;
    if (!document.hidden) {
      try {
        await fn();
      } catch (err) {
        if (!pageRequests.signal.aborted) console.warn("refresh failed:", err.message || err);
      }
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}
