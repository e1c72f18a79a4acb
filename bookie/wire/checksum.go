package wire

import (
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of an entry as the writer sends it: ledger id,
// entry id, last add confirmed and length (each 8 bytes big-endian), then
// the payload. The bookie checks it on every add and the reader on every
// read, so corruption anywhere between writer and reader is caught.
func Checksum(ledger, entry, lac, length int64, payload []byte) uint32 {
	var hdr [32]byte
	binary.BigEndian.PutUint64(hdr[0:], uint64(ledger))
	binary.BigEndian.PutUint64(hdr[8:], uint64(entry))
	binary.BigEndian.PutUint64(hdr[16:], uint64(lac))
	binary.BigEndian.PutUint64(hdr[24:], uint64(length))
	return crc32.Update(crc32.Update(0, castagnoli, hdr[:]), castagnoli, payload)
}
