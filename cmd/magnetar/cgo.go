//go:build cgo

package main

// pebbleMallocs: with cgo, Pebble allocates memtables and block caches
// with malloc, outside the Go heap.
const pebbleMallocs = true
