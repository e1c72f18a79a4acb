package broker

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// traffic counts what flows through a topic partition (or a whole broker)
// since it was loaded; rates come from differences between two readings.
type traffic struct {
	msgIn, bytesIn, entriesIn, msgOut, bytesOut atomic.Int64
	// msgDropped: messages of a non-persistent topic that no consumer
	// could take when they were published.
	msgDropped atomic.Int64
}

// published counts one entry of msgs messages stored.
func (c *traffic) published(msgs, bytes int) {
	c.msgIn.Add(int64(msgs))
	c.bytesIn.Add(int64(bytes))
	c.entriesIn.Add(1)
}

// dispatched counts messages handed to a consumer (negative: given back).
func (c *traffic) dispatched(msgs int) { c.msgOut.Add(int64(msgs)) }

// sent counts the bytes of an entry sent to a consumer.
func (c *traffic) sent(bytes int) { c.bytesOut.Add(int64(bytes)) }

// dropped counts messages of a non-persistent topic nobody could take.
func (c *traffic) dropped(msgs int) { c.msgDropped.Add(int64(msgs)) }

type trafficReading struct {
	at                                                      time.Time
	msgIn, bytesIn, entriesIn, msgOut, bytesOut, msgDropped int64
}

func (c *traffic) read(now time.Time) trafficReading {
	return trafficReading{at: now, msgIn: c.msgIn.Load(), bytesIn: c.bytesIn.Load(), entriesIn: c.entriesIn.Load(),
		msgOut: c.msgOut.Load(), bytesOut: c.bytesOut.Load(), msgDropped: c.msgDropped.Load()}
}

// rates are per second between two readings.
type rates struct {
	MsgIn, BytesIn, MsgOut, EntriesIn, BytesOut, MsgDropped float64
}

func (r trafficReading) since(prev trafficReading) rates {
	d := r.at.Sub(prev.at).Seconds()
	if d <= 0 || prev.at.IsZero() {
		return rates{}
	}
	return rates{
		MsgIn:   float64(r.msgIn-prev.msgIn) / d,
		BytesIn: float64(r.bytesIn-prev.bytesIn) / d,
		MsgOut:  float64(r.msgOut-prev.msgOut) / d,

		EntriesIn:  float64(r.entriesIn-prev.entriesIn) / d,
		BytesOut:   float64(r.bytesOut-prev.bytesOut) / d,
		MsgDropped: float64(r.msgDropped-prev.msgDropped) / d,
	}
}

// loadMeter turns the broker's counters and its CPU time into the rates
// of the last interval, for the registration.
type loadMeter struct {
	mu      sync.Mutex
	prev    trafficReading
	prevCPU time.Duration
	last    rates
	cpu     float64 // cores busy over the last interval
}

// sample takes a reading and returns the rates and CPU use since the
// previous one; within a second of it, the previous result (rates over
// shorter spans are mostly noise).
func (m *loadMeter) sample(c *traffic, now time.Time) (rates, float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.prev.at.IsZero() && now.Sub(m.prev.at) < time.Second {
		return m.last, m.cpu
	}
	r := c.read(now)
	cpu := processCPU()
	if !m.prev.at.IsZero() {
		m.last = r.since(m.prev)
		if d := now.Sub(m.prev.at); d > 0 {
			m.cpu = float64(cpu-m.prevCPU) / float64(d)
		}
	}
	m.prev, m.prevCPU = r, cpu
	return m.last, m.cpu
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
