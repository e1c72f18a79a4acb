package check

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Event types, the values of Event.Type.
const (
	TypeMeta  = "meta"
	TypeSend  = "send"
	TypeRecv  = "recv"
	TypeFault = "fault"
)

// Send results, the values of Event.Result.
const (
	ResultOK      = "ok"      // acknowledged: written
	ResultFailed  = "failed"  // known not written
	ResultUnknown = "unknown" // may or may not be written (a timeout)
)

// Subscription types, the values of Event.SubType.
const (
	SubExclusive = "exclusive"
	SubFailover  = "failover"
	SubShared    = "shared"
	SubKeyShared = "key_shared"
	SubDrain     = "drain"
)

// MaxLine is the longest line ReadHistory accepts, newline excluded.
const MaxLine = 1 << 20

// MsgID is a message's position: partition, ledger, entry, index in batch.
// Ordered by (Partition, Ledger, Entry, Batch); positions are only
// comparable within a partition.
type MsgID struct {
	Partition int32 `json:"p"`
	Ledger    int64 `json:"l"`
	Entry     int64 `json:"e"`
	Batch     int32 `json:"b"`
}

// Less reports whether a comes before b. It is meaningful only when both
// are in the same partition.
func (a MsgID) Less(b MsgID) bool {
	if a.Partition != b.Partition {
		return a.Partition < b.Partition
	}
	if a.Ledger != b.Ledger {
		return a.Ledger < b.Ledger
	}
	if a.Entry != b.Entry {
		return a.Entry < b.Entry
	}
	return a.Batch < b.Batch
}

// String returns "p:l:e:b".
func (a MsgID) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", a.Partition, a.Ledger, a.Entry, a.Batch)
}

// Event is one line of history.jsonl. Type says which fields are set.
type Event struct {
	Type string `json:"type"` // "meta", "send", "recv", "fault"
	// meta (first line): the run's setup.
	Meta *Meta `json:"meta,omitempty"`
	// send: one Send call, written when it completed.
	Producer string `json:"producer,omitempty"`
	Seq      int64  `json:"seq,omitempty"`    // per producer, increasing in the order sends were issued
	Result   string `json:"result,omitempty"` // "ok", "failed" (known not written), "unknown" (may or may not be written)
	Error    string `json:"error,omitempty"`
	Start    int64  `json:"start,omitempty"` // unix nanoseconds (send start, fault start)
	End      int64  `json:"end,omitempty"`   // unix nanoseconds (send end, fault healed; 0 = never healed)
	// recv: one message handed to the application.
	Sub        string `json:"sub,omitempty"`      // subscription name
	SubType    string `json:"subType,omitempty"`  // "exclusive", "failover", "shared", "key_shared", "drain"
	Consumer   string `json:"consumer,omitempty"` // consumer instance; a restarted consumer gets a new name
	Time       int64  `json:"time,omitempty"`     // unix nanoseconds when received
	Redelivery uint32 `json:"redelivery,omitempty"`
	// send and recv
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
	ID    *MsgID `json:"id,omitempty"` // send: set when ok; recv: always
	// fault
	Name   string `json:"name,omitempty"`   // e.g. "kill-broker", "pause-broker", "partition-broker-etcd"
	Target string `json:"target,omitempty"` // e.g. "broker-1"
}

// Meta describes the run.
type Meta struct {
	Scenario      string   `json:"scenario"`
	Partitions    int      `json:"partitions"`
	Dedup         bool     `json:"dedup"`         // broker deduplication on
	Subscriptions []string `json:"subscriptions"` // subscriptions created before the first send: each must receive every ok value
	Started       int64    `json:"started"`       // unix nanoseconds
	// KeyOrdered names producers that keep order per key only (Pulsar's
	// key-based batching sends each key's batch in the order of its first
	// message): their producer order is checked per key.
	KeyOrdered []string `json:"keyOrdered,omitempty"`
}

// History is a whole run.
type History struct {
	Meta   Meta
	Sends  []Event
	Recvs  []Event // in the order they were recorded
	Faults []Event
}

// ReadHistory reads a history in JSON lines. The first line must be the
// meta event; every other line a send, recv or fault event. Empty lines
// are skipped. Errors name the line.
func ReadHistory(r io.Reader) (*History, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine+1) // +1: a final line without newline
	h := &History{}
	line, sawMeta := 0, false
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		if len(b) > MaxLine {
			return nil, fmt.Errorf("history line %d: longer than %d bytes", line, MaxLine)
		}
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("history line %d: %w", line, err)
		}
		if !sawMeta {
			if e.Type != TypeMeta || e.Meta == nil {
				return nil, fmt.Errorf("history line %d: first event is %q, want a meta event", line, e.Type)
			}
			h.Meta, sawMeta = *e.Meta, true
			continue
		}
		switch e.Type {
		case TypeSend:
			h.Sends = append(h.Sends, e)
		case TypeRecv:
			if e.ID == nil {
				return nil, fmt.Errorf("history line %d: recv without id", line)
			}
			h.Recvs = append(h.Recvs, e)
		case TypeFault:
			h.Faults = append(h.Faults, e)
		case TypeMeta:
			return nil, fmt.Errorf("history line %d: second meta event", line)
		default:
			return nil, fmt.Errorf("history line %d: unknown event type %q", line, e.Type)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("history line %d: longer than %d bytes", line+1, MaxLine)
		}
		return nil, fmt.Errorf("history line %d: %w", line+1, err)
	}
	if !sawMeta {
		return nil, errors.New("history is empty: no meta event")
	}
	return h, nil
}

// ReadFile reads the history in the file at path.
func ReadFile(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// Writer appends events to a history as JSON lines. It is safe for
// concurrent use. Output is buffered: Close flushes it (and does not close
// the underlying writer).
type Writer struct {
	mu struct {
		sync.Mutex
		buf    *bufio.Writer
		enc    *json.Encoder
		closed bool
	}
}

// NewWriter writes the meta line and returns a Writer for the events.
func NewWriter(w io.Writer, meta Meta) (*Writer, error) {
	hw := &Writer{}
	hw.mu.buf = bufio.NewWriter(w)
	hw.mu.enc = json.NewEncoder(hw.mu.buf)
	hw.mu.enc.SetEscapeHTML(false)
	if err := hw.write(TypeMeta, Event{Meta: &meta}); err != nil {
		return nil, err
	}
	return hw, nil
}

// Send records a completed send.
func (w *Writer) Send(e Event) error { return w.write(TypeSend, e) }

// Recv records a message handed to the application.
func (w *Writer) Recv(e Event) error { return w.write(TypeRecv, e) }

// Fault records a fault; write it when healed (End set) or at the end of
// the run (End 0: never healed).
func (w *Writer) Fault(e Event) error { return w.write(TypeFault, e) }

// Close flushes the buffered events. Later writes fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closed {
		return nil
	}
	w.mu.closed = true
	return w.mu.buf.Flush()
}

func (w *Writer) write(typ string, e Event) error {
	e.Type = typ
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closed {
		return errors.New("check: history writer closed")
	}
	return w.mu.enc.Encode(&e) // one line: Encode appends '\n'
}
