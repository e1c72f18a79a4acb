package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

func TestCodecRoundTrip(t *testing.T) {
	for _, c := range []struct{ l, e int64 }{{1, 0}, {5, 7}, {1<<63 - 1, 1<<63 - 1}} {
		p, l, e, err := decodeKey(entryKey(c.l, c.e))
		if err != nil || p != prefixEntry || l != c.l || e != c.e {
			t.Fatalf("entry key %v: %c %d %d %v", c, p, l, e, err)
		}
		p, l, e, err = decodeKey(ledgerKey(c.l))
		if err != nil || p != prefixLedger || l != c.l || e != -1 {
			t.Fatalf("ledger key %v: %c %d %d %v", c, p, l, e, err)
		}
	}
	buf := make([]byte, entryHeaderLen+3)
	putEntryHeader(buf, entryHeader{LAC: -1, Length: 99, CRC: 0xdeadbeef})
	copy(buf[entryHeaderLen:], "abc")
	h, payload, err := decodeEntry(buf)
	if err != nil || h != (entryHeader{LAC: -1, Length: 99, CRC: 0xdeadbeef}) || string(payload) != "abc" {
		t.Fatalf("entry: %+v %q %v", h, payload, err)
	}
	rec := ledgerRecord{Fenced: true, LAC: 12, MasterKey: []byte("k")}
	got, err := decodeLedgerRecord(encodeLedgerRecord(rec))
	if err != nil || got.Fenced != rec.Fenced || got.LAC != rec.LAC || !bytes.Equal(got.MasterKey, rec.MasterKey) {
		t.Fatalf("ledger record: %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {'e', 1}, {'m'}, {'x', 0, 0}, entryKey(0, 1), append(entryKey(1, 1)[:9], 0xff, 0, 0, 0, 0, 0, 0, 0)} {
		if _, _, _, err := decodeKey(bad); err == nil {
			t.Errorf("decodeKey(%x) accepted", bad)
		}
	}
}

// Decoders must reject, never panic on, whatever bytes a damaged disk holds,
// and re-encode what they accept to the same bytes.
func FuzzDecodeKey(f *testing.F) {
	f.Add(entryKey(1, 2))
	f.Add(ledgerKey(3))
	f.Add([]byte("s-cookie"))
	f.Fuzz(func(t *testing.T, k []byte) {
		p, l, e, err := decodeKey(k)
		if err != nil {
			return
		}
		var again []byte
		if p == prefixEntry {
			again = entryKey(l, e)
		} else {
			again = ledgerKey(l)
		}
		if !bytes.Equal(again, k) {
			t.Fatalf("key %x decodes to %c %d %d which encodes to %x", k, p, l, e, again)
		}
	})
}

func FuzzDecodeEntry(f *testing.F) {
	buf := make([]byte, entryHeaderLen+4)
	putEntryHeader(buf, entryHeader{LAC: 3, Length: 10, CRC: 1})
	f.Add(buf)
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, v []byte) {
		h, payload, err := decodeEntry(v)
		if err != nil {
			return
		}
		again := make([]byte, entryHeaderLen+len(payload))
		putEntryHeader(again, h)
		copy(again[entryHeaderLen:], payload)
		if !bytes.Equal(again, v) {
			t.Fatalf("entry %x re-encodes to %x", v, again)
		}
	})
}

func FuzzDecodeLedgerState(f *testing.F) {
	f.Add(encodeLedgerRecord(ledgerRecord{Fenced: true, LAC: 5, MasterKey: []byte("key")}))
	f.Add(encodeLedgerRecord(ledgerRecord{LAC: -1}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		rec, err := decodeLedgerRecord(v)
		if err != nil {
			return
		}
		if again := encodeLedgerRecord(rec); !bytes.Equal(again, v) {
			t.Fatalf("ledger record %x re-encodes to %x", v, again)
		}
	})
}

// The entry log's index values (version 3) decode to what was encoded, for
// any LAC, and stay small for the usual ones.
func TestEntryPointerRoundTrip(t *testing.T) {
	for _, c := range []struct {
		entry, lac int64
		p          entryPointer
		maxLen     int // 0: no bound checked
	}{
		{0, -1, entryPointer{file: 1, off: entryRecordOverhead, len: 0}, 6},
		{1000, 999, entryPointer{file: 12, off: 100 << 20, len: 1024}, 10},                  // the usual add
		{1 << 40, 1<<40 - 3, entryPointer{file: 70_000, off: 127 << 20, len: 64 << 10}, 12}, // a big ledger, a late LAC
		{5, 9, entryPointer{file: 1, off: 64, len: 1}, 0},                                   // a LAC past the entry (no add sends one)
		{5, -1 << 63, entryPointer{file: 1, off: 64, len: 1}, 0},
		{1<<63 - 1, -1, entryPointer{file: 1<<32 - 1, off: 1<<63 - 1, len: MaxPayload}, maxEntryPointerLen},
	} {
		v := appendEntryPointer(nil, c.entry, c.lac, c.p)
		if c.maxLen > 0 && len(v) > c.maxLen {
			t.Errorf("%+v: %d bytes, want at most %d", c, len(v), c.maxLen)
		}
		h, payload, p, isPtr, err := decodeStoredEntry(c.entry, v)
		if err != nil || !isPtr || payload != nil || p != c.p || h != (entryHeader{LAC: c.lac}) {
			t.Errorf("%+v: encoded %x, decoded %+v %+v %v %v", c, v, h, p, isPtr, err)
		}
	}
}

// Index values written before version 3 (the entry's header in full, then
// fixed-width file, offset and length) are still read.
func TestEntryPointerVersion2(t *testing.T) {
	v := []byte{
		2,                                              // version
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // LAC -1
		0, 0, 0, 0, 0, 0, 0x04, 0, // length 1024
		0xde, 0xad, 0xbe, 0xef, // crc32c
		0, 0, 0, 7, // file
		0, 0, 0, 0, 0, 0, 0x10, 0, // offset 4096
		0, 0, 0x04, 0, // payload length 1024
	}
	h, payload, p, isPtr, err := decodeStoredEntry(0, v)
	if err != nil || !isPtr || payload != nil || p != (entryPointer{file: 7, off: 4096, len: 1024}) || h.LAC != -1 {
		t.Fatalf("decoded %+v %+v %v %v", h, p, isPtr, err)
	}
	if _, _, _, _, err := decodeStoredEntry(0, v[:len(v)-1]); !errors.Is(err, errCorrupt) {
		t.Fatalf("short version 2 value: %v", err)
	}
}

func TestEntryPointerRejects(t *testing.T) {
	good := appendEntryPointer(nil, 10, 9, entryPointer{file: 3, off: 4096, len: 100})
	for name, v := range map[string][]byte{
		"empty":               {},
		"version only":        {pointerVersion},
		"truncated":           good[:len(good)-1],
		"trailing byte":       append(slices.Clone(good), 0),
		"overlong varint":     {pointerVersion, 0x83, 0x00, 0x80, 0x20, 0x64, 0x01}, // file 3 in two bytes
		"file over 32 bits":   appendUvarints(pointerVersion, 1<<32, 4096, 100, 1),
		"offset over 63 bits": appendUvarints(pointerVersion, 3, 1<<63, 100, 1),
		"payload too long":    appendUvarints(pointerVersion, 3, 4096, MaxPayload+1, 1),
		"varint overflow":     {pointerVersion, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x64, 0x01},
	} {
		if _, _, _, _, err := decodeStoredEntry(10, v); !errors.Is(err, errCorrupt) {
			t.Errorf("%s (%x): %v, want corrupt", name, v, err)
		}
	}
}

func appendUvarints(version byte, xs ...uint64) []byte {
	v := []byte{version}
	for _, x := range xs {
		v = binary.AppendUvarint(v, x)
	}
	return v
}

// What decodeStoredEntry accepts as a pointer it re-encodes to the same
// bytes; it never panics.
func FuzzDecodeStoredEntry(f *testing.F) {
	f.Add(int64(10), appendEntryPointer(nil, 10, 9, entryPointer{file: 3, off: 4096, len: 100}))
	f.Add(int64(0), []byte{2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x04, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x04, 0})
	f.Add(int64(1), []byte{3, 0x80})
	f.Fuzz(func(t *testing.T, entry int64, v []byte) {
		h, _, p, isPtr, err := decodeStoredEntry(entry, v)
		if err != nil || !isPtr || v[0] != pointerVersion {
			return
		}
		if again := appendEntryPointer(nil, entry, h.LAC, p); !bytes.Equal(again, v) {
			t.Fatalf("pointer %x re-encodes to %x", v, again)
		}
	})
}
