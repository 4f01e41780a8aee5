// app.js: the console's router. The location's hash picks the view:
//   #/             the wall (wall.js)
//   #/stream/<id>  a stream's page with the zone and line editor (stream.js)
//   #/new          add a stream; #/edit/<id> edit or remove one (form.js)
//   #/health       doctor's checks, NATS, nodes (health.js)
// Whenever the API answers 401 the login form replaces the view; once the
// token is accepted (the session cookie set) the view comes back.

import { onUnauthorized, login, logout } from './api.js';
import { h } from './dom.js';
import { Wall } from './wall.js';
import { StreamPage } from './stream.js';
import { StreamForm } from './form.js';
import { HealthPage } from './health.js';

const root = document.getElementById('app');
let view = null;
let loggingIn = false;

function route() {
  if (view) view.close();
  view = null;
  loggingIn = false;
  showLogout();
  const [, page, arg] = location.hash.replace(/^#\/?/, '/').split('/');
  const id = arg ? decodeURIComponent(arg) : '';
  document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('here', a.getAttribute('href') === `#/${page || ''}`));
  switch (page) {
    case 'stream': view = new StreamPage(root, id); break;
    case 'new': view = new StreamForm(root, null); break;
    case 'edit': view = new StreamForm(root, id); break;
    case 'health': view = new HealthPage(root); break;
    default: view = new Wall(root);
  }
}

function showLogin() {
  if (loggingIn) return;
  loggingIn = true;
  sessionStorage.removeItem(LOGGED_IN);
  showLogout();
  if (view) view.close();
  view = null;
  const token = h('input#token', { type: 'password', name: 'token', autocomplete: 'current-password', required: true });
  const error = h('p.error#login-error', { hidden: true, role: 'alert' });
  const form = h('form.login', {
    onsubmit: async (e) => {
      e.preventDefault();
      const err = await login(token.value);
      if (err) {
        error.textContent = err;
        error.hidden = false;
        return;
      }
      sessionStorage.setItem(LOGGED_IN, '1');
      route();
    },
  }, h('label', {}, 'API token', token), h('button#login-submit', { type: 'submit' }, 'Log in'), error,
  h('p.muted', {}, 'The token of api.token_file. It stays in this browser session (a cookie that scripts cannot read) and is sent to this vigil only.'));
  root.replaceChildren(h('h1', {}, 'Log in to vigil'), form);
  token.focus();
}

// Log out is offered only after a login with a token in this browser
// session (the cookie is not readable by scripts, and without a token the
// server never asks for one), and never on the login form.
const logoutButton = document.getElementById('logout');
const LOGGED_IN = 'vigil-logged-in';
function showLogout() { logoutButton.hidden = loggingIn || !sessionStorage.getItem(LOGGED_IN); }

onUnauthorized(showLogin);
logoutButton.addEventListener('click', async () => {
  await logout();
  showLogin();
});
window.addEventListener('hashchange', route);
route();
