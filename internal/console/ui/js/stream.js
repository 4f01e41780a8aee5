// stream.js: one stream's page: the live view large, the latency budget
// as a stacked bar per stage with the budget line, per-zone occupancy and
// line counts, recent analytics events with their snapshots, and the zone
// and line editor (editor.js).

import { api, streamPath } from './api.js';
import { h, num } from './dom.js';
import { LiveView } from './live.js';
import { downReason, dropsText } from './wall.js';
import { Editor } from './editor.js';

const REFRESH_MS = 2000;

/** The stages of the latency bar, in pipeline order (StatusSnapshot.StagesMS). */
export const STAGES = ['decode', 'queue', 'preprocess', 'infer', 'postprocess', 'analytics', 'publish'];

/** Draws the latency bar of a status into el. */
export function latencyBar(el, st) {
  const stages = (st && st.stages_ms) || null;
  if (!stages) {
    el.replaceChildren(h('p.muted', {}, 'no frame published in the last 5 s'));
    return;
  }
  const total = STAGES.reduce((a, k) => a + (stages[k] || 0), 0);
  const budget = st.budget_ms || 0;
  const full = Math.max(total, budget, st.p99_ms || 0) * 1.1 || 1;
  const pct = (v) => `${(100 * v) / full}%`;
  const segs = STAGES.filter((k) => stages[k] > 0).map((k) =>
    h(`div.seg.${k}`, { title: `${k} ${num(stages[k], 2)} ms`, style: { width: pct(stages[k]) }, dataset: { stage: k } }));
  // A mark near the bar's right end has its label on its left.
  const mark = (cls, v, label) => h(`div.mark.${cls}${v / full > 0.75 ? '.flip' : ''}`, { style: { left: pct(v) }, title: label }, h('span', {}, label));
  const marks = [];
  if (budget) marks.push(mark('budget', budget, `budget ${num(budget, 0)} ms`));
  if (st.p99_ms) marks.push(mark('p99', st.p99_ms, `P99 ${num(st.p99_ms, 0)} ms`));
  const legend = STAGES.filter((k) => stages[k] > 0).map((k) => h('li', {}, h(`i.${k}`), `${k} ${num(stages[k], 2)} ms`));
  el.replaceChildren(h('div.bar', {}, ...segs, ...marks), h('ul.legend', {}, ...legend, h('li', {}, `mean total ${num(total, 1)} ms`)));
}

function countsView(c) {
  if (!c) return h('p.muted', {}, 'no counts yet (the stream has no zones or lines, or nothing has been seen)');
  const by = (m) => Object.keys(m || {}).sort().map((k) => `${k} ${m[k]}`).join(', ') || '0';
  return h('div', {},
    h('table.counts', {}, h('thead', {}, h('tr', {}, h('th', {}, 'zone'), h('th', {}, 'inside now'), h('th', {}, 'by class'))),
      h('tbody', {}, ...(c.zones || []).map((z) => h('tr', { dataset: { zone: z.name } }, h('td', {}, z.name), h('td.n', {}, String(z.total)), h('td', {}, by(z.occupancy)))))),
    h('table.counts', {}, h('thead', {}, h('tr', {}, h('th', {}, 'line'), h('th', {}, 'in'), h('th', {}, 'out'))),
      h('tbody', {}, ...(c.lines || []).map((l) => h('tr', { dataset: { line: l.name } }, h('td', {}, l.name), h('td', {}, by(l.in)), h('td', {}, by(l.out)))))));
}

function eventView(e) {
  const where = e.zone ? `zone ${e.zone}` : e.line ? `line ${e.line}${e.direction ? ' ' + e.direction : ''}` : '';
  const what = [e.label, e.track_id ? '#' + e.track_id.split('-').pop() : '', where].filter(Boolean).join(' · ');
  return h('li.event', { dataset: { type: e.type } },
    e.snapshot ? h('img.snap', { src: `/v1/snapshots/${encodeURIComponent(e.snapshot)}`, alt: `snapshot of ${e.type}`, loading: 'lazy' }) : h('div.snap.none', {}, 'no snapshot'),
    h('div', {}, h('strong', {}, e.type), h('div', {}, what), h('time.muted', {}, new Date(e.time).toLocaleTimeString())));
}

export class StreamPage {
  constructor(root, id) {
    this.id = id;
    this.live = new LiveView(id, { fps: 10 });
    this.f = { state: h('span.state'), why: h('p.why'), numbers: h('p.numbers'), bar: h('div.latency'), counts: h('div'), events: h('ul.events'),
      edit: h('a.small#edit-stream', { href: `#/edit/${encodeURIComponent(id)}`, hidden: true }, 'edit stream') };
    this.editor = new Editor(this, this.live);
    this.editor.el.hidden = true; // until the stream is known to exist
    root.replaceChildren(
      h('h1', {}, id, ' ', this.f.state, ' ', this.f.edit),
      this.f.why,
      h('div.stream-page', {},
        h('section.big', {}, this.live.el, this.f.numbers, this.editor.el),
        h('section.side', {},
          h('h2', {}, 'Latency budget'), this.f.bar,
          h('h2', {}, 'Zones and lines now'), this.f.counts,
          h('h2', {}, 'Recent events'), this.f.events)));
    this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  async refresh() {
    let s, a;
    try {
      [s, a] = await Promise.all([api('GET', streamPath(this.id)), api('GET', `${streamPath(this.id)}/analytics`)]);
    } catch (e) {
      this.f.why.textContent = `vigil is not answering: ${e.message}`;
      this.f.why.hidden = false;
      return;
    }
    if (this.closed) return;
    if (s.ok) this.showStream(s.data);
    else this.showMissing(s);
    if (a.ok) {
      this.f.counts.replaceChildren(countsView(a.data.counts));
      this.f.events.replaceChildren(...a.data.events.map(eventView));
      if (!a.data.events.length) this.f.events.replaceChildren(h('li.muted', {}, 'no analytics events yet'));
    }
  }

  showStream(stream) {
    // A refresh sent before a save can be answered after it: its spec is
    // older (a lower revision) and must not replace the saved one, which
    // the next edit starts from; its status is still the newer.
    if (this.stream && stream.revision < this.stream.revision) {
      stream = { ...this.stream, status: stream.status, node: stream.node };
    }
    this.stream = stream;
    const st = stream.status;
    this.live.el.hidden = false;
    this.live.setRunning(!!st && st.state === 'running');
    this.editor.el.hidden = false;
    this.f.edit.hidden = false;
    this.f.state.textContent = st ? st.state : 'unplaced';
    this.f.state.className = `state ${st ? st.state : 'unplaced'}`;
    const why = downReason(st);
    this.f.why.textContent = why;
    this.f.why.hidden = !why;
    this.f.numbers.textContent = st
      ? `fps in ${num(st.fps_in)} · out ${num(st.fps_out)} · drops ${dropsText(st)} · ${st.width || '?'}×${st.height || '?'} ${st.codec || ''} · model ${st.model || stream.model || 'default'} · node ${stream.node || '–'}`
      : '';
    latencyBar(this.f.bar, st);
    if (!this.editor.busy()) this.live.setAnalytics(stream.analytics);
    this.editor.showList(stream.analytics);
  }

  /** A stream the API does not answer: a 404 is "stream not found", with no live view, editor or edit link. */
  showMissing(r) {
    this.f.why.textContent = r.status === 404 ? 'stream not found' : (r.data && r.data.error) || `HTTP ${r.status}`;
    this.f.why.hidden = false;
    if (r.status !== 404) return;
    this.stream = null;
    this.live.setRunning(false);
    this.live.el.hidden = true;
    this.editor.cancel();
    this.editor.el.hidden = true;
    this.f.edit.hidden = true;
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
    this.live.close();
  }
}
