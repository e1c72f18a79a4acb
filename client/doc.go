// Package client will be Magnetar's Go SDK (producers, consumers, readers),
// shaped like pulsar-client-go. It depends only on package proto, so that
// applications do not pull in server code; internal/archtest checks that.
// It is built in issue 3.
package client
