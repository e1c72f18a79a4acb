package wire

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of an entry as the writer sends it: ledger id,
// entry id, last add confirmed and length (each 8 bytes big-endian), then
// the payload. The bookie checks it on every add and the reader on every
// read, so corruption anywhere between writer and reader is caught.
func Checksum(ledger, entry, lac, length int64, payload []byte) uint32 {
	// The header is folded in byte by byte from the table: a header array
	// handed to crc32.Update escapes to the heap, one allocation per add
	// on the writer and on every bookie.
	crc := ^uint32(0)
	for _, v := range [4]uint64{uint64(ledger), uint64(entry), uint64(lac), uint64(length)} {
		for shift := 56; shift >= 0; shift -= 8 {
			crc = castagnoli[byte(crc)^byte(v>>shift)] ^ crc>>8
		}
	}
	return crc32.Update(^crc, castagnoli, payload)
}
