// live.js: a stream's live picture with its overlay. The picture comes
// from GET /v1/streams/{id}/live.ws: for every frame a text message (the
// frame's detection message, as published on NATS) and then a binary
// message (the frame's JPEG). The overlay is SVG whose viewBox is the
// frame's size in source pixels, so boxes, zones and lines are drawn in
// the coordinates the API and the detection messages use.

import { h, s } from './dom.js';
import { streamPath } from './api.js';

// A view is open only while its stream runs (setRunning): a stream that
// is down has no pictures, and its view would hold one of the server's
// viewer slots (live.max_viewers) that a running stream's view needs.
// A view that closes while its stream runs is opened again after
// RETRY_MS, doubled after each try that brought no frame (the server's
// viewer cap), up to MAX_RETRY_MS.
const RETRY_MS = 2000;
const MAX_RETRY_MS = 30000;
// Close codes of live.ws (docs/api.md, "Pictures").
const NO_PICTURES = 4501; // the stream's frames cannot be copied into pictures (the reason says why)

/** A colour per label, stable across frames. */
function colour(label) {
  let n = 0;
  for (const c of label || '') n = (n * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${n % 360} 85% 55%)`;
}

export class LiveView {
  /**
   * @param {string} id the stream's id
   * @param {{fps?: number}} opts frames per second asked of the server
   */
  constructor(id, opts = {}) {
    this.id = id;
    this.fps = opts.fps || 5;
    this.width = 0;
    this.height = 0;
    this.analytics = null; // the stream's analytics spec: zones and lines
    this.pending = null; // the detection message of the frame to come
    this.frames = 0;
    this.labels = new Set(); // the labels of every detection shown so far
    this.closed = false;
    this.img = h('img', { alt: `live picture of ${id}`, draggable: false });
    this.geometry = s('g', { class: 'geometry' });
    this.boxes = s('g', { class: 'boxes' });
    this.drawing = s('g', { class: 'drawing' });
    this.svg = s('svg', { class: 'overlay', preserveAspectRatio: 'none' }, this.geometry, this.boxes, this.drawing);
    this.note = h('p.note', {}, 'waiting for a picture…');
    this.el = h('div.live', { dataset: { stream: id, frames: '0' } }, this.img, this.svg, this.note);
    this.running = null; // not known until the first setRunning
  }

  /** Opens the live view when running is true, closes it when false. */
  setRunning(running) {
    if (running === this.running) return;
    this.running = running;
    if (running) {
      this.retry = 0;
      this.note.textContent = 'waiting for a picture…';
      this.connect();
      return;
    }
    this.disconnect();
    this.note.textContent = 'no live picture: the stream is not running';
    this.note.hidden = false;
  }

  connect() {
    if (this.closed || !this.running) return;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}${streamPath(this.id)}/live.ws?fps=${this.fps}`);
    ws.binaryType = 'blob';
    ws.onmessage = (ev) => this.message(ev.data);
    const framesBefore = this.frames;
    ws.onclose = (ev) => {
      if (this.ws !== ws || this.closed) return;
      this.retry = this.frames > framesBefore ? RETRY_MS : Math.min(2 * (this.retry || RETRY_MS / 2), MAX_RETRY_MS);
      if (ev.code === NO_PICTURES) this.retry = MAX_RETRY_MS;
      this.note.textContent = ev.code === NO_PICTURES ? `no pictures: ${ev.reason || 'not served for this stream'}` : 'no live picture (retrying)';
      this.note.hidden = false;
      this.timer = setTimeout(() => this.connect(), this.retry);
    };
    this.ws = ws;
  }

  /** Closes the WebSocket and cancels a retry; its onclose then does nothing. */
  disconnect() {
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close();
  }

  message(data) {
    if (typeof data === 'string') {
      try { this.pending = JSON.parse(data); } catch { this.pending = null; }
      return;
    }
    const msg = this.pending;
    this.pending = null;
    const url = URL.createObjectURL(data);
    const old = this.img.src;
    this.img.onload = () => {
      if (old) URL.revokeObjectURL(old);
      this.show(msg);
    };
    this.img.src = url;
  }

  /** Shows the frame just loaded with its detection message. */
  show(msg) {
    this.note.hidden = true;
    this.frames++;
    this.el.dataset.frames = String(this.frames);
    if (!msg) return;
    this.el.dataset.seq = String(msg.seq);
    this.el.dataset.epoch = msg.epoch || '';
    this.last = msg;
    if (msg.width !== this.width || msg.height !== this.height) {
      this.width = msg.width;
      this.height = msg.height;
      this.svg.setAttribute('viewBox', `0 0 ${msg.width} ${msg.height}`);
      this.drawGeometry();
    }
    this.drawBoxes(msg.detections || []);
  }

  drawBoxes(dets) {
    const sw = Math.max(1.5, this.width / 320);
    const nodes = [];
    for (const d of dets) {
      this.labels.add(d.label);
      const b = d.box;
      const c = colour(d.label);
      const text = `${d.label}${d.track_id ? ' #' + d.track_id.split('-').pop() : ''} ${Math.round(d.score * 100)}%`;
      nodes.push(s('rect', {
        class: 'box', x: b.x1, y: b.y1, width: b.x2 - b.x1, height: b.y2 - b.y1,
        stroke: c, 'stroke-width': sw, 'data-label': d.label, 'data-track': d.track_id || '',
      }));
      nodes.push(s('text', { class: 'label', x: b.x1, y: Math.max(b.y1 - sw * 2, sw * 8), fill: c, 'font-size': sw * 8 }, text));
    }
    this.boxes.replaceChildren(...nodes);
  }

  /** Sets the stream's analytics spec (zones and lines to draw). */
  setAnalytics(a) {
    this.analytics = a || null;
    this.drawGeometry();
  }

  /** The factors from the spec's frame_size to the frame's pixels. */
  scale() {
    const fs = this.analytics && this.analytics.frame_size;
    if (!fs || !this.width) return [1, 1];
    return [this.width / fs[0], this.height / fs[1]];
  }

  drawGeometry() {
    if (!this.width) return;
    const [kx, ky] = this.scale();
    const sw = Math.max(1.5, this.width / 320);
    const a = this.analytics || {};
    const nodes = [];
    for (const z of a.zones || []) {
      const pts = z.polygon.map(([x, y]) => `${x * kx},${y * ky}`).join(' ');
      nodes.push(s('polygon', { class: 'zone', points: pts, 'stroke-width': sw, 'data-name': z.name }));
      const [x, y] = z.polygon[0];
      nodes.push(s('text', { class: 'zone-name', x: x * kx + sw * 2, y: y * ky + sw * 9, 'font-size': sw * 8 }, z.name));
    }
    for (const l of a.lines || []) {
      nodes.push(s('line', { class: 'line', x1: l.a[0] * kx, y1: l.a[1] * ky, x2: l.b[0] * kx, y2: l.b[1] * ky, 'stroke-width': sw * 1.5, 'data-name': l.name }));
      nodes.push(s('text', { class: 'line-name', x: l.a[0] * kx + sw * 2, y: l.a[1] * ky - sw * 2, 'font-size': sw * 8 }, l.name));
    }
    this.geometry.replaceChildren(...nodes);
  }

  /** Converts a pointer event to frame pixels (the overlay's viewBox). */
  toFrame(ev) {
    const p = this.svg.createSVGPoint();
    p.x = ev.clientX;
    p.y = ev.clientY;
    const q = p.matrixTransform(this.svg.getScreenCTM().inverse());
    return [Math.round(q.x), Math.round(q.y)];
  }

  close() {
    this.closed = true;
    this.disconnect();
    if (this.img.src) URL.revokeObjectURL(this.img.src);
  }
}
