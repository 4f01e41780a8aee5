// health.js: vigil doctor's checks (GET /v1/health, run in the service),
// the fleet's nodes (GET /v1/nodes) and the NATS connection's state (the
// "nats" member of GET /v1/streams).

import { api } from './api.js';
import { h, num } from './dom.js';

const REFRESH_MS = 5000;

export class HealthPage {
  constructor(root) {
    this.f = { checks: h('div'), nodes: h('div'), nats: h('div') };
    root.replaceChildren(h('h1', {}, 'Health'),
      h('h2', {}, 'Checks'), this.f.checks, h('h2', {}, 'NATS'), this.f.nats, h('h2', {}, 'Nodes'), this.f.nodes);
    this.f.checks.replaceChildren(h('p.muted', {}, 'measuring…'));
    this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  async refresh() {
    let c, n, s;
    try {
      [c, n, s] = await Promise.all([api('GET', '/v1/health'), api('GET', '/v1/nodes'), api('GET', '/v1/streams')]);
    } catch (e) {
      this.f.checks.replaceChildren(h('p.error', {}, `vigil is not answering: ${e.message}`));
      return;
    }
    if (this.closed) return;
    this.f.checks.replaceChildren(c.ok ? checks(c.data) : h('p.error', {}, c.data ? c.data.error : `HTTP ${c.status}`));
    this.f.nodes.replaceChildren(n.ok ? nodes(n.data.nodes || []) : h('p.muted', {}, n.data ? n.data.error : `HTTP ${n.status}`));
    this.f.nats.replaceChildren(s.ok ? nats(s.data.nats) : h('p.muted', {}, `HTTP ${s.status}`));
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
  }
}

function checks(rep) {
  return h('div', {},
    h('p.muted', {}, `over the last ${num(rep.window_s)} s`),
    h('table.checks', {}, h('thead', {}, h('tr', {}, ...['', 'check', 'measured', 'want', 'advice'].map((t) => h('th', {}, t)))),
      h('tbody', {}, ...rep.checks.map((c) => {
        const status = !c.measured ? 'n/a' : c.ok ? 'ok' : 'warn';
        return h(`tr.${status}`, { dataset: { check: c.name } }, h('td', {}, h(`span.badge.${status}`, {}, status)),
          h('td', {}, c.name), h('td', {}, c.measured || '–'), h('td', {}, c.threshold), h('td', {}, status === 'ok' ? '' : c.advice || ''));
      }))));
}

function nats(st) {
  if (!st) return h('p.muted', {}, 'unknown');
  return h('dl.kv', {},
    h('dt', {}, 'connected'), h('dd', { className: st.connected ? 'ok' : 'warn' }, st.connected ? 'yes' : `no, since ${st.down_since || '?'}`),
    h('dt', {}, 'held while down'), h('dd', {}, `${st.held_messages} messages, ${st.held_bytes} of ${st.buffer_limit_bytes} bytes`),
    h('dt', {}, 'undelivered'), h('dd', {}, String(st.undelivered_messages)),
    h('dt', {}, 'reconnects'), h('dd', {}, String(st.reconnects)));
}

function nodes(list) {
  if (!list.length) return h('p.muted', {}, 'no nodes');
  return h('table.nodes', {}, h('thead', {}, h('tr', {}, ...['node', 'version', 'host', 'API', 'streams', 'load (Mpx/s)', 'state'].map((t) => h('th', {}, t)))),
    h('tbody', {}, ...list.map((n) => h('tr', { dataset: { node: n.id } }, h('td', {}, n.id), h('td', {}, n.version || ''), h('td', {}, n.host || ''),
      h('td', {}, n.api || ''), h('td', {}, String(Object.keys(n.streams || {}).length)), h('td', {}, num((n.load || 0) / 1e6)),
      h('td', {}, n.draining ? 'draining' : 'up')))));
}
