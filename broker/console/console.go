// Package console is the web console the broker serves on its admin port
// under /console/: static files embedded in the binary (no build step),
// a small single-page application that reads and acts only through the
// admin REST API, with the caller's token when authentication is on.
//
// It shows the cluster (clusters, brokers with their load, bookies with
// state and disk), tenants, namespaces, topics with live rate and backlog
// charts (computed in the browser from the stats' counters, polled every
// two seconds), and subscriptions with their consumers; and it does the
// common actions: create a topic, skip messages, reset a cursor, unload a
// topic. The files hold no data, so they are served without credentials.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// Handler serves the console's files under Prefix.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The console talks only to this origin; nothing may frame it.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
