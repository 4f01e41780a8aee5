// editor.js: draws zones (polygons) and lines on a stream's live picture
// with the mouse, names them, picks their classes, and saves them with
// PATCH /v1/streams/{id}: the API validates them as it validates any
// change, and its error is shown as it answers it. Points are frame
// pixels as the overlay shows them, converted to the coordinates of the
// spec's frame_size (set to the picture's size when the spec has none).

import { api, streamPath } from './api.js';
import { h, s } from './dom.js';

export class Editor {
  constructor(page, live) {
    this.page = page;
    this.live = live;
    this.mode = null; // 'zone' | 'line' while drawing
    this.points = []; // frame pixels
    this.editing = null; // {kind, index} of the item being edited
    this.f = {
      name: h('input', { name: 'name', placeholder: 'name', autocomplete: 'off' }),
      classes: h('input', { name: 'classes', placeholder: 'classes, comma-separated (empty: all)', autocomplete: 'off' }),
      picks: h('span.picks'),
      error: h('p.error#editor-error', { hidden: true, role: 'alert' }),
      hint: h('p.hint'),
      list: h('ul.geometry-list'),
    };
    this.form = h('form.editor-form', { hidden: true, onsubmit: (e) => { e.preventDefault(); this.save(); } },
      this.f.name, this.f.classes, this.f.picks,
      h('button#editor-redraw', { type: 'button', onclick: () => this.start(this.editing ? this.editing.kind : 'zone') }, 'Redraw'),
      h('button#editor-save', { type: 'submit' }, 'Save'),
      h('button', { type: 'button', onclick: () => this.cancel() }, 'Cancel'));
    this.el = h('section.editor', {},
      h('h2', {}, 'Zones and lines'),
      h('div.toolbar', {},
        h('button#draw-zone', { type: 'button', onclick: () => this.start('zone') }, 'Draw zone'),
        h('button#draw-line', { type: 'button', onclick: () => this.start('line') }, 'Draw line'),
        h('button#draw-finish', { type: 'button', onclick: () => this.finish() }, 'Finish')),
      this.f.hint, this.form, this.f.error, this.f.list);
    live.svg.addEventListener('click', (e) => this.click(e));
  }

  /** Whether a drawing or an edit is under way (the page then leaves the overlay alone). */
  busy() { return this.mode !== null || !this.form.hidden; }

  start(kind) {
    this.mode = kind;
    this.points = [];
    this.live.el.classList.add('drawing-mode');
    this.f.hint.textContent = kind === 'zone'
      ? 'Click the corners of the zone on the picture, then Finish.'
      : 'Click the two ends of the line on the picture.';
    this.preview();
  }

  click(ev) {
    if (!this.mode) return;
    this.points.push(this.live.toFrame(ev));
    this.preview();
    if (this.mode === 'line' && this.points.length === 2) this.finish();
  }

  preview() {
    const pts = this.points.map((p) => p.join(',')).join(' ');
    const dots = this.points.map(([x, y]) => s('circle', { cx: x, cy: y, r: Math.max(3, this.live.width / 160), class: 'vertex' }));
    const shape = this.mode === 'zone' ? s('polygon', { points: pts, class: 'draft' }) : s('polyline', { points: pts, class: 'draft' });
    this.live.drawing.replaceChildren(shape, ...dots);
  }

  /** Ends the drawing and asks for the name and classes. */
  finish() {
    if (!this.mode) return;
    this.drawn = { kind: this.mode, points: this.points };
    this.mode = null;
    this.live.el.classList.remove('drawing-mode');
    this.f.hint.textContent = `${this.drawn.points.length} point(s) drawn: name it and save.`;
    this.showForm();
    this.f.name.focus();
  }

  /**
   * Shows the form, with a button per class known here (seen in the
   * picture, or named by the stream's zones and lines) that adds it to
   * the classes or takes it out. The API checks them against the model.
   */
  showForm() {
    const a = (this.page.stream && this.page.stream.analytics) || {};
    const known = new Set(this.live.labels);
    for (const it of [...(a.zones || []), ...(a.lines || [])]) for (const c of it.classes || []) known.add(c);
    const toggle = (c) => {
      const cur = this.f.classes.value.split(',').map((x) => x.trim()).filter(Boolean);
      this.f.classes.value = (cur.includes(c) ? cur.filter((x) => x !== c) : [...cur, c]).join(', ');
    };
    this.f.picks.replaceChildren(...[...known].sort().map((c) =>
      h('button.pick', { type: 'button', title: `add or remove ${c}`, onclick: () => toggle(c) }, c)));
    this.form.hidden = false;
  }

  cancel() {
    this.mode = null;
    this.drawn = null;
    this.editing = null;
    this.form.hidden = true;
    this.f.name.value = '';
    this.f.classes.value = '';
    this.f.hint.textContent = '';
    this.f.error.hidden = true;
    this.live.el.classList.remove('drawing-mode');
    this.live.drawing.replaceChildren();
  }

  /** The analytics spec with one zone or line added, replaced or removed. */
  changed(kind, index, item) {
    const a = structuredClone((this.page.stream && this.page.stream.analytics) || {});
    const key = kind === 'zone' ? 'zones' : 'lines';
    const list = a[key] || [];
    if (index === null) list.push(item);
    else if (item === null) list.splice(index, 1);
    else list[index] = item;
    return { key, list, frame_size: a.frame_size };
  }

  toSpec(points) {
    const [kx, ky] = this.live.scale();
    return points.map(([x, y]) => [Math.round((x / kx) * 100) / 100, Math.round((y / ky) * 100) / 100]);
  }

  async save() {
    const kind = this.drawn ? this.drawn.kind : this.editing && this.editing.kind;
    if (!kind) return;
    const old = this.editing ? this.currentItem() : {};
    const item = { ...old, name: this.f.name.value.trim() };
    const classes = this.f.classes.value.split(',').map((c) => c.trim()).filter(Boolean);
    if (classes.length) item.classes = classes;
    else delete item.classes;
    if (this.drawn) {
      const pts = this.toSpec(this.drawn.points);
      if (kind === 'zone') item.polygon = pts;
      else [item.a, item.b] = [pts[0], pts[1]];
    }
    const c = this.changed(kind, this.editing ? this.editing.index : null, item);
    await this.patch(c);
  }

  async patch(c) {
    const analytics = { [c.key]: c.list };
    if (!c.frame_size && this.live.width) analytics.frame_size = [this.live.width, this.live.height];
    let r;
    try {
      r = await api('PATCH', streamPath(this.page.id), { analytics });
    } catch (e) {
      r = { ok: false, status: 0, data: { error: `vigil is not answering: ${e.message}` } };
    }
    if (!r.ok) {
      this.f.error.textContent = (r.data && r.data.error) || `HTTP ${r.status}`;
      this.f.error.dataset.field = (r.data && r.data.field) || '';
      this.f.error.hidden = false;
      return false;
    }
    this.cancel();
    this.page.showStream(r.data);
    return true;
  }

  currentItem() {
    const a = (this.page.stream && this.page.stream.analytics) || {};
    return (this.editing.kind === 'zone' ? a.zones : a.lines)[this.editing.index];
  }

  edit(kind, index) {
    this.cancel();
    this.editing = { kind, index };
    const it = this.currentItem();
    this.f.name.value = it.name;
    this.f.classes.value = (it.classes || []).join(', ');
    this.f.hint.textContent = `Editing ${kind} ${it.name}: rename it, change its classes, or redraw it.`;
    this.showForm();
  }

  async remove(kind, index) {
    await this.patch(this.changed(kind, index, null));
  }

  /** Lists the stream's zones and lines with edit and delete buttons. */
  showList(a) {
    // Rebuilt only when it changed: a button must not be replaced under
    // the pointer between the press and the release.
    const key = JSON.stringify([(a && a.zones) || [], (a && a.lines) || []]);
    if (key === this.listed) return;
    this.listed = key;
    const row = (kind, it, i) => h('li', { dataset: { kind, name: it.name } },
      h('span', {}, `${kind} `, h('strong', {}, it.name), it.classes ? ` (${it.classes.join(', ')})` : ' (all classes)'),
      h('button.edit', { type: 'button', onclick: () => this.edit(kind, i) }, 'Edit'),
      h('button.delete', { type: 'button', onclick: () => this.remove(kind, i) }, 'Delete'));
    const items = [...((a && a.zones) || []).map((z, i) => row('zone', z, i)), ...((a && a.lines) || []).map((l, i) => row('line', l, i))];
    this.f.list.replaceChildren(...(items.length ? items : [h('li.muted', {}, 'none yet')]));
  }
}
