// Package testutil holds helpers shared by Magnetar's tests: an embedded
// etcd per test, a TCP proxy that can cut or black-hole connections, a
// clock moved by hand, and helpers that wait on conditions instead of
// sleeping.
package testutil
