package storage

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// On-disk layout in Pebble (all integers big-endian so that key order is
// numeric order):
//
//	'e' ledger(8) entry(8)  -> entry record
//	'm' ledger(8)           -> ledger state record
//	's' name                -> system value (the bookie's cookie, ...)
//
// Entry record: version(1)=1, last add confirmed(8), length(8), crc32c(4),
// payload. Ledger state record: version(1)=1, flags(1) (bit 0: fenced),
// explicit last add confirmed(8), master key length(2), master key.
const (
	prefixEntry  byte = 'e'
	prefixLedger byte = 'm'
	prefixSystem byte = 's'

	entryKeyLen  = 17
	ledgerKeyLen = 9

	entryHeaderLen = 1 + 8 + 8 + 4
	recordVersion  = 1

	flagFenced = 1 << 0

	// MaxMasterKeyLen caps the master key a ledger may use.
	MaxMasterKeyLen = 256
	// MaxPayload caps an entry's payload (the bookie's own cap, at most
	// 64 MiB, is below it).
	MaxPayload = 100 << 20
)

var errCorrupt = errors.New("storage: corrupt record")

// splitAtPrefixes is Pebble's span policy: a flush or compaction ends its
// output table where the key's first byte changes, so that no sstable
// holds keys of two kinds (entries, ledger records, system values, the
// entry log's checkpoint and file accounting).
//
// Without it, each flush wrote one table from the checkpoint key ('c'),
// before every entry, to the newest entry or accounting key ('f') after
// them: a table whose range covered the whole entry index. Moving it out of
// L0 then rewrote every index table below it, about every fourth flush, so
// the cost grew with the data the bookie held (docs/benchmarks.md, "The
// index was rewritten"). With the split, a ledger's new entries lie past
// its older tables, so only the new tables and the small tables of the
// other kinds are compacted. Ledgers written at the same time still
// overlap: a flush's entry table runs from the lowest ledger id written to
// the highest, so its compaction rewrites the tables of every ledger whose
// id lies between them, closed ones included, as in any LSM.
func splitAtPrefixes(start []byte) (pebble.SpanPolicy, []byte, error) {
	if len(start) == 0 || start[0] == 0xff {
		return pebble.SpanPolicy{}, nil, nil // the rest of the key space
	}
	return pebble.SpanPolicy{}, []byte{start[0] + 1}, nil
}

func entryKey(ledger, entry int64) []byte {
	k := make([]byte, entryKeyLen)
	putEntryKey(k, ledger, entry)
	return k
}

func putEntryKey(k []byte, ledger, entry int64) {
	k[0] = prefixEntry
	binary.BigEndian.PutUint64(k[1:], uint64(ledger))
	binary.BigEndian.PutUint64(k[9:], uint64(entry))
}

func ledgerKey(ledger int64) []byte {
	k := make([]byte, ledgerKeyLen)
	k[0] = prefixLedger
	binary.BigEndian.PutUint64(k[1:], uint64(ledger))
	return k
}

func systemKey(name string) []byte { return append([]byte{prefixSystem}, name...) }

// decodeKey splits an entry or ledger key; entry is -1 for ledger keys.
func decodeKey(k []byte) (prefix byte, ledger, entry int64, err error) {
	if len(k) == 0 {
		return 0, 0, 0, fmt.Errorf("%w: empty key", errCorrupt)
	}
	switch k[0] {
	case prefixEntry:
		if len(k) != entryKeyLen {
			return 0, 0, 0, fmt.Errorf("%w: entry key of %d bytes", errCorrupt, len(k))
		}
		ledger = int64(binary.BigEndian.Uint64(k[1:]))
		entry = int64(binary.BigEndian.Uint64(k[9:]))
		if ledger <= 0 || entry < 0 {
			return 0, 0, 0, fmt.Errorf("%w: entry key %d/%d", errCorrupt, ledger, entry)
		}
		return prefixEntry, ledger, entry, nil
	case prefixLedger:
		if len(k) != ledgerKeyLen {
			return 0, 0, 0, fmt.Errorf("%w: ledger key of %d bytes", errCorrupt, len(k))
		}
		ledger = int64(binary.BigEndian.Uint64(k[1:]))
		if ledger <= 0 {
			return 0, 0, 0, fmt.Errorf("%w: ledger key %d", errCorrupt, ledger)
		}
		return prefixLedger, ledger, -1, nil
	}
	return 0, 0, 0, fmt.Errorf("%w: unknown key prefix %q", errCorrupt, k[0])
}

// entryHeader is the fixed part of an entry record.
type entryHeader struct {
	LAC    int64
	Length int64
	CRC    uint32
}

func putEntryHeader(b []byte, h entryHeader) {
	b[0] = recordVersion
	binary.BigEndian.PutUint64(b[1:], uint64(h.LAC))
	binary.BigEndian.PutUint64(b[9:], uint64(h.Length))
	binary.BigEndian.PutUint32(b[17:], h.CRC)
}

// decodeEntry returns the header and the payload, which aliases v.
func decodeEntry(v []byte) (entryHeader, []byte, error) {
	if len(v) < entryHeaderLen {
		return entryHeader{}, nil, fmt.Errorf("%w: entry record of %d bytes", errCorrupt, len(v))
	}
	if v[0] != recordVersion {
		return entryHeader{}, nil, fmt.Errorf("%w: entry record version %d", errCorrupt, v[0])
	}
	h := entryHeader{
		LAC:    int64(binary.BigEndian.Uint64(v[1:])),
		Length: int64(binary.BigEndian.Uint64(v[9:])),
		CRC:    binary.BigEndian.Uint32(v[17:]),
	}
	return h, v[entryHeaderLen:], nil
}

// ledgerRecord is what a ledger state record holds.
type ledgerRecord struct {
	Fenced    bool
	LAC       int64 // explicit LAC (WriteLAC); adds carry their own
	MasterKey []byte
}

func encodeLedgerRecord(r ledgerRecord) []byte {
	b := make([]byte, 12+len(r.MasterKey))
	b[0] = recordVersion
	if r.Fenced {
		b[1] |= flagFenced
	}
	binary.BigEndian.PutUint64(b[2:], uint64(r.LAC))
	binary.BigEndian.PutUint16(b[10:], uint16(len(r.MasterKey)))
	copy(b[12:], r.MasterKey)
	return b
}

func decodeLedgerRecord(v []byte) (ledgerRecord, error) {
	if len(v) < 12 {
		return ledgerRecord{}, fmt.Errorf("%w: ledger record of %d bytes", errCorrupt, len(v))
	}
	if v[0] != recordVersion {
		return ledgerRecord{}, fmt.Errorf("%w: ledger record version %d", errCorrupt, v[0])
	}
	if v[1]&^flagFenced != 0 {
		return ledgerRecord{}, fmt.Errorf("%w: unknown ledger flags %#x", errCorrupt, v[1])
	}
	n := int(binary.BigEndian.Uint16(v[10:]))
	if n > MaxMasterKeyLen || len(v) != 12+n {
		return ledgerRecord{}, fmt.Errorf("%w: ledger record master key of %d bytes in %d", errCorrupt, n, len(v))
	}
	return ledgerRecord{
		Fenced:    v[1]&flagFenced != 0,
		LAC:       int64(binary.BigEndian.Uint64(v[2:])),
		MasterKey: append([]byte(nil), v[12:]...),
	}, nil
}
