package broker

import (
	"context"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/pulsarwire"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// A connection whose client does not read: what is queued for the writer
// stays under the high-water mark (waitWritable blocks above it, and
// returns once the client reads), and flush returns once what was queued
// is written, not merely taken by the writer. Deterministic: the frames
// are queued before the writer starts, and a net.Pipe
// blocks each write until the other end reads it.
func TestPulsarConnWriteHighWater(t *testing.T) {
	server, peer := net.Pipe()
	defer peer.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc := newPulsarConn(&Server{log: zap.NewNop(), hardCtx: ctx}, server)
	defer func() { pc.close(); pc.wg.Wait() }()

	msg := &pulsarpb.CommandMessage{ConsumerId: proto.Uint64(1), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1)}}
	// Three frames queued before the writer runs: the mark is passed.
	for range 3 {
		pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_MESSAGE.Enum(), Message: msg},
			make([]byte, pulsarWriteHighWater/2))
	}
	pc.out.Lock()
	queued := len(pc.out.buf)
	pc.out.Unlock()
	if queued < pulsarWriteHighWater {
		t.Fatalf("queued %d bytes, want the mark (%d) passed", queued, pulsarWriteHighWater)
	}
	pc.out.Lock()
	writable := pc.writableLocked()
	pc.out.Unlock()
	if writable {
		t.Fatal("writable with the mark passed: a pump would queue more")
	}
	waited := make(chan bool, 1)
	go func() { waited <- pc.waitWritable() }()
	// Once the waiter is parked (it made the channel the writer closes),
	// it must not have returned: nothing was written.
	for parked := false; !parked; runtime.Gosched() {
		pc.out.Lock()
		parked = pc.out.written != nil
		pc.out.Unlock()
	}
	select {
	case <-waited:
		t.Fatal("waitWritable returned with the mark passed and nothing written")
	default:
	}
	// The writer runs and the client reads: the queue drains, waitWritable
	// returns.
	pc.wg.Add(1)
	go pc.writer()
	read := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, peer)
		read <- n
	}()
	if !<-waited {
		t.Fatal("waitWritable reported the connection ended")
	}
	pc.flush()
	pc.out.Lock()
	left, writing := len(pc.out.buf), pc.out.writing
	pc.out.Unlock()
	if left != 0 || writing {
		t.Fatalf("after flush: %d bytes queued, writing %v", left, writing)
	}
	pc.close()
	want := int64(3 * (pulsarWriteHighWater/2 + frameOverhead(t, msg)))
	select {
	case n := <-read:
		if n != want {
			t.Fatalf("the client read %d bytes, want %d", n, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client's read did not end after close")
	}
}

// frameOverhead is the size of a MESSAGE frame's header: the frame minus
// its payload.
func frameOverhead(t *testing.T, msg *pulsarpb.CommandMessage) int {
	b, err := pulsarwire.Append(nil, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_MESSAGE.Enum(), Message: msg}, []byte{1})
	if err != nil {
		t.Fatal(err)
	}
	return len(b) - 1
}
