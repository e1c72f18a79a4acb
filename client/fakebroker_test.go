package client

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
)

// fakeBroker is an in-process broker for the SDK's tests: it answers
// lookups (with its own address, or the ones it is told to give), stores
// what producers send and acknowledges it, refuses sends over its message
// size, and accepts subscriptions.
type fakeBroker struct {
	brokerpb.UnimplementedBrokerServer
	addr string
	srv  *grpc.Server
	// maxMessage is the limit told to producers (0: none told) and
	// checked on sends; recvLimit, the gRPC limit (a send over it is not
	// even read).
	maxMessage uint32
	silent     bool
	together   bool

	mu struct {
		sync.Mutex
		owners           []string // answers of the next lookups (then: addr)
		partitions       uint32
		lookups          int
		sends            int      // sends received
		stall            bool     // the next producer open is not answered
		busy             bool     // the next producer open after the stalled one is refused
		stored           [][]byte // payloads of the accepted sends
		requests         []int    // sends per request received
		receiptsTogether bool     // the last producer open asked for Receipts
		batchSizes       []int    // their messages (NumMessagesInBatch; 0: not a batch)
		// refuse, if set, is the reason every send is refused with (as a
		// broker that cannot store anything for now).
		refuse brokerpb.ErrorReason
		// cutAfter, if set, is how many sends the next producer stream
		// takes without answering them before it breaks (a broker that
		// went away with the sends in flight).
		cutAfter int
		// endSeen and endRelease, if set: each producer stream the client
		// half-closes sends to endSeen, then ends only once endRelease is
		// closed (a broker still letting go of the producer).
		endSeen, endRelease chan struct{}
	}
}

type fakeOptions struct {
	maxMessage uint32 // default 1 MiB
	recvLimit  int    // default maxMessage + 1 MiB
	silent     bool   // do not tell producers the limit (an older broker)
	// together: take several sends per request and, to a client that
	// asks, answer them with one Receipts (else: one send per request,
	// as an older broker).
	together bool
	// stallFirst: the first producer open is never answered, and the
	// next one finds the name busy (the broker still holds the first).
	stallFirst bool
	ln         net.Listener
}

func startFakeBroker(t *testing.T, o fakeOptions) *fakeBroker {
	t.Helper()
	if o.maxMessage == 0 {
		o.maxMessage = 1 << 20
	}
	if o.recvLimit == 0 {
		o.recvLimit = int(o.maxMessage) + 1<<20
	}
	ln := o.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeBroker{addr: ln.Addr().String(), maxMessage: o.maxMessage, silent: o.silent, together: o.together}
	f.mu.stall, f.mu.busy = o.stallFirst, o.stallFirst
	f.srv = grpc.NewServer(grpc.MaxRecvMsgSize(o.recvLimit))
	brokerpb.RegisterBrokerServer(f.srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		f.srv.Stop()
		<-done
	})
	return f
}

// tell makes the next lookups answer these addresses, in order.
func (f *fakeBroker) tell(owners ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.owners = append(f.mu.owners, owners...)
}

func (f *fakeBroker) lookups() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.lookups
}

func (f *fakeBroker) sends() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.sends
}

// refuseSends makes the broker refuse every send with reason (UNKNOWN:
// accept them again).
func (f *fakeBroker) refuseSends(reason brokerpb.ErrorReason) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.refuse = reason
}

// cutAfterSends makes the next producer stream take n sends without
// answering them, then break.
func (f *fakeBroker) cutAfterSends(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.cutAfter = n
}

// holdProducerEnd makes the producer streams the client half-closes wait
// for release before they end; seen gets one value per half-close.
func (f *fakeBroker) holdProducerEnd() (seen <-chan struct{}, release chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.endSeen, f.mu.endRelease = make(chan struct{}, 16), make(chan struct{})
	return f.mu.endSeen, f.mu.endRelease
}

// storedMessages splits the stored batches into their messages' payloads.
func (f *fakeBroker) storedMessages(t *testing.T) []string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for i, p := range f.mu.stored {
		if f.mu.batchSizes[i] == 0 {
			out = append(out, string(p))
			continue
		}
		msgs, err := entry.SplitBatch(p, f.mu.batchSizes[i])
		if err != nil {
			t.Fatalf("stored batch %d: %v", i, err)
		}
		for _, m := range msgs {
			out = append(out, string(m.Payload))
		}
	}
	return out
}

func (f *fakeBroker) stored() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.mu.stored...)
}

// requests returns how many sends each request held, and whether the
// last producer open asked for Receipts.
func (f *fakeBroker) requests() ([]int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.mu.requests...), f.mu.receiptsTogether
}

func brokerError(code codes.Code, reason brokerpb.ErrorReason, msg string) error {
	st, _ := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Domain: "broker.magnetar.io", Reason: reason.String()})
	return st.Err()
}

func (f *fakeBroker) Lookup(ctx context.Context, req *brokerpb.LookupRequest) (*brokerpb.LookupResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.lookups++
	addr := f.addr
	if len(f.mu.owners) > 0 {
		addr, f.mu.owners = f.mu.owners[0], f.mu.owners[1:]
	}
	return &brokerpb.LookupResponse{BrokerAddress: addr}, nil
}

func (f *fakeBroker) PartitionedMetadata(ctx context.Context, req *brokerpb.PartitionedMetadataRequest) (*brokerpb.PartitionedMetadataResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &brokerpb.PartitionedMetadataResponse{Partitions: f.mu.partitions}, nil
}

func (f *fakeBroker) GetLastMessageId(ctx context.Context, req *brokerpb.GetLastMessageIdRequest) (*brokerpb.GetLastMessageIdResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &brokerpb.GetLastMessageIdResponse{MessageId: &brokerpb.MessageId{LedgerId: 1, EntryId: int64(len(f.mu.stored)) - 1, Partition: -1, BatchIndex: -1}}, nil
}

func (f *fakeBroker) Produce(stream brokerpb.Broker_ProduceServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetOpen() == nil {
		return status.Error(codes.InvalidArgument, "open first")
	}
	f.mu.Lock()
	f.mu.receiptsTogether = first.GetOpen().ReceiptsTogether
	stall, busy := f.mu.stall, !f.mu.stall && f.mu.busy
	f.mu.stall = false
	if busy {
		f.mu.busy = false
	}
	f.mu.Unlock()
	if stall {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	if busy {
		return brokerError(codes.FailedPrecondition, brokerpb.ErrorReason_PRODUCER_BUSY, "producer fake-producer is already connected")
	}
	if err := stream.Send(&brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Opened{Opened: &brokerpb.ProducerOpened{
		ProducerName: "fake-producer", LastSequenceId: -1, MaxMessageSize: map[bool]uint32{false: f.maxMessage}[f.silent],
		SendsTogether: f.together}}}); err != nil {
		return err
	}
	receiptsTogether := f.together && first.GetOpen().ReceiptsTogether
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			f.mu.Lock()
			seen, release := f.mu.endSeen, f.mu.endRelease
			f.mu.Unlock()
			if seen != nil {
				seen <- struct{}{}
				select {
				case <-release:
				case <-stream.Context().Done():
				}
			}
			return nil
		}
		if status.Code(err) == codes.ResourceExhausted {
			return brokerError(codes.InvalidArgument, brokerpb.ErrorReason_MESSAGE_TOO_LARGE, err.Error())
		}
		if err != nil {
			return err
		}
		sends := []*brokerpb.Send{req.GetSend()}
		if f.together && req.GetSends() != nil {
			sends = req.GetSends().GetSends()
		}
		if sends[0] == nil {
			return status.Errorf(codes.InvalidArgument, "unexpected %T", req.Request)
		}
		f.mu.Lock()
		f.mu.requests = append(f.mu.requests, len(sends))
		f.mu.Unlock()
		var receipts []*brokerpb.SendReceipt
		for _, send := range sends {
			resp, err := f.take(send)
			if err != nil {
				return err
			}
			if resp == nil {
				continue
			}
			if r := resp.GetReceipt(); r != nil && receiptsTogether {
				receipts = append(receipts, r)
				continue
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		if len(receipts) > 0 {
			if err := stream.Send(&brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipts{Receipts: &brokerpb.Receipts{Receipts: receipts}}}); err != nil {
				return err
			}
		}
	}
}

// take stores or refuses one send: its answer, nil for none (the stream
// is to be cut later), or an error that ends the stream.
func (f *fakeBroker) take(send *brokerpb.Send) (*brokerpb.ProduceResponse, error) {
	{
		f.mu.Lock()
		f.mu.sends++
		refuse := f.mu.refuse
		if f.mu.cutAfter > 0 {
			f.mu.cutAfter--
			last := f.mu.cutAfter == 0
			f.mu.Unlock()
			if last {
				return nil, status.Error(codes.Unavailable, "the broker went away")
			}
			return nil, nil // unanswered
		}
		f.mu.Unlock()
		var resp *brokerpb.ProduceResponse
		// The broker's limit is on the stored entry: metadata and payload.
		if refuse != brokerpb.ErrorReason_UNKNOWN {
			resp = &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{
				SequenceId: send.SequenceId, Reason: refuse, Message: "refused: " + refuse.String()}}}
		} else if proto.Size(send.Metadata)+len(send.Payload) > int(f.maxMessage) {
			resp = &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Error{Error: &brokerpb.SendError{
				SequenceId: send.SequenceId, Reason: brokerpb.ErrorReason_MESSAGE_TOO_LARGE, Message: "too large"}}}
		} else {
			f.mu.Lock()
			f.mu.stored = append(f.mu.stored, send.Payload)
			f.mu.batchSizes = append(f.mu.batchSizes, int(send.Metadata.GetNumMessagesInBatch()))
			id := int64(len(f.mu.stored) - 1)
			f.mu.Unlock()
			resp = &brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Receipt{Receipt: &brokerpb.SendReceipt{
				SequenceId: send.SequenceId, MessageId: &brokerpb.MessageId{LedgerId: 1, EntryId: id, Partition: -1, BatchIndex: -1}}}}
		}
		return resp, nil
	}
}

func (f *fakeBroker) Consume(stream brokerpb.Broker_ConsumeServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetSubscribe() == nil {
		return status.Error(codes.InvalidArgument, "subscribe first")
	}
	if err := stream.Send(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Subscribed{Subscribed: &brokerpb.Subscribed{}}}); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// deadAddr and stalledAddr: see testutil.
var (
	deadAddr    = testutil.DeadAddr
	stalledAddr = testutil.StalledAddr
)
