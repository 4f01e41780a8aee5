// dom.js: a tiny element builder, so that views read as the markup they make.

/**
 * h('div.tile', {dataset: {id}}, child, ...) makes an element: the tag may
 * carry .classes and a #id, in any order; props are set as properties (on*, dataset and
 * style objects merged); children are nodes or strings (text, never HTML).
 */
export function h(spec, props, ...children) {
  const [tag, ...parts] = spec.split(/(?=[.#])/);
  const el = document.createElement(tag.startsWith('.') || tag.startsWith('#') ? 'div' : tag);
  for (const p of tag.startsWith('.') || tag.startsWith('#') ? [tag, ...parts] : parts) {
    if (p[0] === '#') el.id = p.slice(1);
    else el.classList.add(p.slice(1));
  }
  for (const [k, v] of Object.entries(props || {})) {
    if (k === 'dataset' || k === 'style') Object.assign(el[k], v);
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k in el) el[k] = v;
    else el.setAttribute(k, v);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

/** s('rect', {x: 1, ...}) makes an SVG element with those attributes. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  el.append(...children);
  return el;
}

/** Formats a number with at most d decimals, '–' for none. */
export function num(v, d = 1) {
  return typeof v === 'number' && isFinite(v) ? v.toFixed(d).replace(/\.0+$/, '') : '–';
}
