// wall.js: a tile per stream, with its live picture and its numbers,
// refreshed from GET /v1/streams every REFRESH_MS without a reload.

import { api } from './api.js';
import { h, num } from './dom.js';
import { LiveView } from './live.js';

const REFRESH_MS = 2000;

/** The line a tile shows under its picture: why a stream is not running. */
export function downReason(st) {
  if (!st) return 'not running on any node (disabled, or not placed yet)';
  if (st.state === 'running') return '';
  if ((st.state === 'reconnecting' || st.state === 'failed') && st.last_error) return `${st.state}: ${st.last_error}`;
  return st.state;
}

/** "queue_full 1.2/s, deadline 0.4/s", or "none". */
export function dropsText(st) {
  const by = (st && st.fps_dropped_by_reason) || {};
  const parts = Object.keys(by).sort().map((r) => `${r} ${num(by[r])}/s`);
  return parts.length ? parts.join(', ') : 'none';
}

export class Wall {
  constructor(root) {
    this.root = root;
    this.tiles = new Map(); // id → {el, live, fields}
    this.grid = h('div.wall');
    this.notice = h('p.notice', { hidden: true });
    root.replaceChildren(h('h1', {}, 'Streams'), this.notice, this.grid);
    this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  async refresh() {
    let r;
    try { r = await api('GET', '/v1/streams'); } catch (e) {
      this.notice.textContent = `vigil is not answering: ${e.message}`;
      this.notice.hidden = false;
      return;
    }
    if (!r.ok || this.closed) return;
    const list = r.data;
    this.notice.hidden = !list.registry_error;
    this.notice.textContent = list.registry_error || '';
    const seen = new Set();
    for (const st of list.streams) {
      seen.add(st.id);
      let t = this.tiles.get(st.id);
      if (!t) {
        t = this.tile(st.id);
        this.tiles.set(st.id, t);
      }
      this.update(t, st);
    }
    for (const [id, t] of this.tiles) {
      if (!seen.has(id)) {
        t.live.close();
        t.el.remove();
        this.tiles.delete(id);
      }
    }
    const order = [...this.tiles.keys()].sort();
    const shown = [...this.grid.children].map((el) => el.dataset.id);
    if (!order.length) this.grid.replaceChildren(h('p.muted', {}, 'No streams yet: ', h('a', { href: '#/new' }, 'add one'), '.'));
    else if (shown.join('\n') !== order.join('\n')) this.grid.replaceChildren(...order.map((id) => this.tiles.get(id).el));
  }

  tile(id) {
    const live = new LiveView(id, { fps: 5 });
    const f = {
      state: h('span.state'), node: h('span.node'), fps: h('span'), p99: h('span'), drops: h('span'), why: h('p.why'),
    };
    const el = h('article.tile', { dataset: { id } },
      h('header', {}, h('a.id', { href: `#/stream/${encodeURIComponent(id)}` }, id), f.state),
      live.el,
      h('dl.stats', {},
        h('dt', {}, 'fps in/out'), h('dd', {}, f.fps),
        h('dt', {}, 'P99'), h('dd', {}, f.p99),
        h('dt', {}, 'drops'), h('dd', {}, f.drops),
        h('dt', {}, 'node'), h('dd', {}, f.node)),
      f.why);
    return { el, live, f };
  }

  update(t, stream) {
    const st = stream.status;
    const state = st ? st.state : 'unplaced';
    t.f.state.textContent = stream.enabled === false ? 'disabled' : state;
    t.f.state.className = `state ${state}`;
    t.el.dataset.state = state;
    t.f.fps.textContent = st ? `${num(st.fps_in)} / ${num(st.fps_out)}` : '–';
    t.f.p99.textContent = st && st.p99_ms ? `${num(st.p99_ms, 0)} ms` : '–';
    t.f.drops.textContent = dropsText(st);
    t.f.node.textContent = stream.node || '–';
    const why = downReason(st);
    t.f.why.textContent = why;
    t.f.why.hidden = !why;
    t.live.setAnalytics(stream.analytics);
    t.live.setRunning(state === 'running');
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
    for (const t of this.tiles.values()) t.live.close();
  }
}
