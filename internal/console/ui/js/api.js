// api.js: the console's only way to the server. Every call goes to the
// same origin and carries the session cookie (set by POST /v1/session);
// a 401 answer means the browser has no valid session, and the app shows
// the login form (onUnauthorized).

let unauthorized = () => {};

/** Sets what happens when the API answers 401. */
export function onUnauthorized(fn) { unauthorized = fn; }

/**
 * Calls the API. Resolves to {ok, status, data}; data is the decoded JSON
 * body (errors are {error, field}) or null. Rejects only when the server
 * cannot be reached.
 */
export async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = method === 'PATCH' ? 'application/merge-patch+json' : 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  let data = null;
  const text = await resp.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = { error: text }; }
  }
  if (resp.status === 401 && path !== '/v1/session') unauthorized();
  return { ok: resp.ok, status: resp.status, data };
}

/** Logs in with token: resolves to null, or the error message. */
export async function login(token) {
  const r = await api('POST', '/v1/session', { token });
  return r.ok ? null : (r.data && r.data.error) || `HTTP ${r.status}`;
}

/** Logs out: clears the session cookie. */
export function logout() { return api('DELETE', '/v1/session'); }

/** The path of a stream's API resource. */
export function streamPath(id) { return `/v1/streams/${encodeURIComponent(id)}`; }
