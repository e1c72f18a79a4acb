// Package admin is the HTTP layer of the broker's admin REST API, served
// under Pulsar's paths (/admin/v2/..., /lookup/v2/...) on the broker's
// HTTP port: routing with an authorization rule per route, request
// decoding and validation, the JSON shapes of Pulsar's requests and
// answers, and the writing of results and errors.
//
// The broker keeps what touches its internals (topics, subscriptions,
// cursors, managed ledgers, the metadata in etcd, ownership, asking other
// brokers): each resource's file declares, as a small interface, what it
// asks of the broker, and package broker implements them (Backend). The
// authorization rules (Rules) are the broker's too, and so is the one
// table that maps errors to the JSON "errorCode" and HTTP status (New's
// codeOf); handlers return the sentinel errors of broker/internal/errs.
//
// One file per resource:
//
//   - api.go: routing, JSON in and out, error writing, 404 and 405 in JSON;
//   - clusters.go: /admin/v2/clusters, the one cluster a deployment is;
//   - brokers.go: /admin/v2/brokers and /admin/v2/broker-stats;
//   - tenants.go: /admin/v2/tenants;
//   - namespaces.go: /admin/v2/namespaces and their policies;
//   - topics.go: /admin/v2/persistent topics, their stats and messages,
//     ownership (/admin/v2/owners, unload) and /lookup/v2/topic;
//   - subscriptions.go: a topic's subscriptions and their cursors;
//   - schemas.go: /admin/v2/schemas;
//   - permissions.go: the grants of namespaces and topics;
//   - bookies.go: /admin/v2/bookies, autorecovery's view of the bookies.
package admin
