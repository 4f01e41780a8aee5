// form.js: add, edit and remove a stream. The form sends what it holds
// to the API (POST /v1/streams), or, when editing, a merge patch to
// /v1/streams/{id} of only the fields the user changed: a field the
// stored spec leaves unset stays unset, and a save without a change sends
// nothing (any change to the spec restarts the stream). It shows the
// API's error next to the field it names ("field" of the error body), so
// the console never checks anything the API does not.

import { api, streamPath } from './api.js';
import { h } from './dom.js';

/** The form's fields: [name, label, input type, help]. */
const FIELDS = [
  ['id', 'Id', 'text', 'letters, digits, _ and -'],
  ['url', 'URL', 'text', 'rtsp://, rtsps://, http(s)://, file:// or a path'],
  ['model', 'Model', 'text', 'empty: the default model'],
  ['fps_limit', 'FPS limit', 'number', '0: none'],
  ['budget_ms', 'Latency budget (ms)', 'number', '0: pipeline.budget_ms'],
  ['priority', 'Priority', ['', 'high', 'normal', 'low'], ''],
  ['transport', 'RTSP transport', ['', 'tcp', 'udp'], ''],
  ['enabled', 'Enabled', 'checkbox', ''],
  ['realtime', 'Real time (files)', 'checkbox', 'play a file at its own rate'],
  ['loop', 'Loop (files)', 'checkbox', ''],
];

export class StreamForm {
  /** id: the stream to edit, or null to add one. */
  constructor(root, id) {
    this.id = id;
    this.inputs = {};
    this.errors = {};
    const rows = FIELDS.map(([name, label, type, help]) => {
      let input;
      if (Array.isArray(type)) input = h('select', { name }, ...type.map((v) => h('option', { value: v }, v || '(default)')));
      else input = h('input', { name, type, autocomplete: 'off', step: type === 'number' ? 'any' : undefined });
      if (name === 'enabled') input.checked = true;
      if (name === 'id' && id) input.disabled = true;
      this.inputs[name] = input;
      this.errors[name] = h('span.field-error', { dataset: { field: name }, hidden: true, role: 'alert' });
      return h('label.row', {}, h('span.label', {}, label), input, h('span.help', {}, help), this.errors[name]);
    });
    this.general = h('p.error#form-error', { hidden: true, role: 'alert' });
    this.note = h('p.muted#form-note', { hidden: true, role: 'status' });
    const buttons = [h('button#stream-save', { type: 'submit' }, id ? 'Save' : 'Add stream')];
    if (id) buttons.push(h('button.danger#stream-remove', { type: 'button', onclick: () => this.remove() }, 'Remove stream'));
    this.form = h('form.stream-form', { onsubmit: (e) => { e.preventDefault(); this.submit(); }, novalidate: true }, ...rows, this.general, this.note, h('div.buttons', {}, ...buttons));
    root.replaceChildren(h('h1', {}, id ? `Edit ${id}` : 'Add a stream'), this.form);
    if (id) this.load();
  }

  async load() {
    const r = await api('GET', streamPath(this.id));
    if (r.status === 404) {
      // Nothing to edit or remove: the form goes, the message stays.
      this.general.textContent = `stream ${this.id} not found`;
      this.general.hidden = false;
      this.form.replaceChildren(this.general);
      return;
    }
    if (!r.ok) return this.showError(r);
    for (const [name, input] of Object.entries(this.inputs)) {
      const v = r.data[name];
      if (input.type === 'checkbox') input.checked = name === 'enabled' ? v !== false : !!v;
      else input.value = v === undefined || v === null || v === 0 ? '' : String(v);
    }
    this.loaded = this.values(); // what the patch is relative to
  }

  /** What each input holds: checked for a checkbox, else its trimmed text. */
  values() {
    const vals = {};
    for (const [name, input] of Object.entries(this.inputs)) vals[name] = input.type === 'checkbox' ? input.checked : input.value.trim();
    return vals;
  }

  /**
   * The spec members the form holds; empty inputs are left out. As a
   * patch (editing): only the inputs changed since load, an emptied one as
   * null (removed). The URL, shown with its password as ***, is thus sent
   * only when edited, never the redacted one back.
   */
  body(patch) {
    const b = {};
    for (const [name, v] of Object.entries(this.values())) {
      if (patch && (name === 'id' || v === this.loaded[name])) continue;
      if (this.inputs[name].type === 'checkbox') b[name] = v;
      else if (v === '') { if (patch) b[name] = null; }
      else b[name] = this.inputs[name].type === 'number' ? Number(v) : v;
    }
    return b;
  }

  clearErrors() {
    this.general.hidden = true;
    this.note.hidden = true;
    for (const e of Object.values(this.errors)) e.hidden = true;
  }

  /** Shows an API error next to its field, or above the buttons. */
  showError(r) {
    const msg = (r.data && r.data.error) || `HTTP ${r.status}`;
    const field = ((r.data && r.data.field) || '').split(/[.[]/)[0];
    const el = this.errors[field];
    if (el) {
      el.textContent = msg;
      el.hidden = false;
      this.inputs[field].focus();
    } else {
      this.general.textContent = msg;
      this.general.hidden = false;
    }
  }

  async submit() {
    this.clearErrors();
    if (this.id && !this.loaded) return; // not loaded yet: nothing to compare with
    const patch = this.id ? this.body(true) : null;
    if (patch && !Object.keys(patch).length) {
      this.note.textContent = 'no change';
      this.note.hidden = false;
      return;
    }
    let r;
    try {
      r = this.id
        ? await api('PATCH', streamPath(this.id), patch)
        : await api('POST', '/v1/streams', this.body(false));
    } catch (e) {
      return this.showError({ status: 0, data: { error: `vigil is not answering: ${e.message}` } });
    }
    if (!r.ok) return this.showError(r);
    location.hash = '#/';
  }

  async remove() {
    if (!confirm(`Remove stream ${this.id}? Its registry entry is deleted; nothing else is.`)) return;
    const r = await api('DELETE', streamPath(this.id));
    if (!r.ok) return this.showError(r);
    location.hash = '#/';
  }

  close() {}
}
