package storage

import (
	"bytes"
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
