//go:build !cgo

package main

// pebbleMallocs: without cgo, Pebble's memtables and block caches are on
// the Go heap.
const pebbleMallocs = false
