package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	"go.uber.org/zap"
)

// SessionCookie is the cookie that POST /v1/session sets once the token
// sent is right: browsers cannot put an Authorization header on <img> or
// WebSocket requests, so the console authenticates with it. Handler
// accepts it wherever it accepts "Authorization: Bearer". It is HttpOnly
// (page scripts cannot read it), SameSite=Strict (other sites' pages
// cannot send it), Secure under TLS, and has no Expires: it lives for the
// browser session.
const SessionCookie = "vigil_session"

// sessionLabel is the message whose HMAC under the token is the cookie's
// value: the cookie proves the token without holding it, and needs no
// state on the server, so every node of a fleet with the same token
// accepts it.
const sessionLabel = "vigil_session v1"

// SessionRequest is the body of POST /v1/session.
type SessionRequest struct {
	Token string `json:"token"`
}

// Session is the body of POST /v1/session's answer.
type Session struct {
	// Auth says whether the API needs a token at all (api.token_file);
	// without one every request is allowed and no cookie is set.
	Auth bool `json:"auth"`
}

// sessionValue is the value of SessionCookie for the configured token.
func (s *Server) sessionValue() string {
	m := hmac.New(sha256.New, []byte(s.o.Token))
	m.Write([]byte(sessionLabel))
	return "v1." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// authorized reports whether r carries the token: as "Authorization:
// Bearer <token>", or as the SessionCookie that POST /v1/session set.
func (s *Server) authorized(r *http.Request) bool {
	if scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return s.tokenIs(strings.TrimSpace(got))
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.sessionValue())) == 1
}

// tokenIs compares got with the token in constant time.
func (s *Server) tokenIs(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.o.Token)) == 1
}

// public reports whether r needs no token: readiness probes, the
// console's page and assets (they hold no data: the page asks for the
// token when the API refuses it), and the session calls themselves.
func public(r *http.Request) bool {
	switch p := r.URL.Path; {
	case p == ReadyPath, p == SessionPath:
		return true
	default:
		return r.Method == http.MethodGet && (p == "/" || strings.HasPrefix(p, ConsolePrefix))
	}
}

// SessionPath is where the console logs in (POST) and out (DELETE).
const SessionPath = "/v1/session"

// createSession checks the token in the body and, when it is right, sets
// SessionCookie. Neither the token nor the cookie is ever logged.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	var req SessionRequest
	if err := json.Unmarshal(b, &req); err != nil {
		writeErr(w, http.StatusBadRequest, "token", `the body must be {"token": "..."}`)
		return
	}
	if s.o.Token == "" {
		writeJSON(w, http.StatusOK, Session{Auth: false})
		return
	}
	if !s.tokenIs(req.Token) {
		s.o.Logger.Warn("console login refused: wrong token", zap.String("remote", r.RemoteAddr))
		writeErr(w, http.StatusUnauthorized, "token", "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: s.sessionValue(), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, Session{Auth: true})
}

// deleteSession clears SessionCookie (logging out).
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}
