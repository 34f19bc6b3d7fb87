package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// A job's last delivery can end with nobody to record it: the node holding
// it dies, its lease expires, and the consumer's MaxDeliver forbids
// another delivery, so no worker ever sees the job again and its status
// would say "running" for ever. The server announces such a message with a
// max-deliveries advisory; one node of the fleet (a queue group) records
// the job failed and removes it from the queue.

// maxDeliveriesAdvisory is the part of the server's
// io.nats.jetstream.advisory.v1.max_deliver event used here.
type maxDeliveriesAdvisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// lostQueueLen bounds the advisories waiting for the handler; they are
// rare (one per job that exhausted its deliveries).
const lostQueueLen = 64

// watchLostLeases subscribes to the consumer's max-deliveries advisories
// and handles them on a goroutine of its own until the returned stop is
// called, which waits for it.
func (w *Worker) watchLostLeases(ctx context.Context) (stop func(), err error) {
	s := w.opts.Subjects.withDefaults()
	subject := fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", s.Stream, s.Consumer())
	ch := make(chan *nats.Msg, lostQueueLen)
	sub, err := w.nc.ChanQueueSubscribe(subject, s.Stream+"-"+s.Consumer(), ch)
	if err != nil {
		return nil, fmt.Errorf("jobs: subscribe %s: %w", subject, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-ch:
				w.lostLease(ctx, m.Data)
			}
		}
	}()
	return func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.Wait()
	}, nil
}

// lostLease records the job of a max-deliveries advisory failed, unless
// its status already tells how it ended.
func (w *Worker) lostLease(ctx context.Context, data []byte) {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(data, &adv); err != nil || adv.StreamSeq == 0 {
		w.log.Warn("unreadable max-deliveries advisory", zap.ByteString("advisory", data), zap.Error(err))
		return
	}
	log := w.log.With(zap.Uint64("stream_seq", adv.StreamSeq), zap.Uint64("deliveries", adv.Deliveries))
	raw, err := w.stream.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		log.Warn("job out of deliveries, but its message is gone", zap.Error(err))
		return
	}
	j, err := Decode(raw.Data)
	if err != nil {
		return // refused on delivery, and recorded failed then
	}
	log = log.With(zap.String("job", j.ID))
	// Compare-and-set: a worker that finished late (its ack arrived after
	// the lease ran out) has the last word.
	st := &Status{ID: j.ID, Parent: j.Parent}
	var rev uint64
	e, err := w.kv.Get(ctx, j.ID)
	switch {
	case err == nil:
		rev = e.Revision()
		var prev Status
		if err := json.Unmarshal(e.Value(), &prev); err != nil {
			log.Warn("unreadable status, overwriting", zap.Error(err))
		} else {
			st = &prev
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		log.Warn("read status of a job out of deliveries", zap.Error(err))
		return
	}
	switch st.State {
	case StateDone, StateFailed, StateSplit:
		return
	}
	holder := "no node"
	if st.Node != "" {
		holder = "node " + st.Node
	}
	st.State = StateFailed
	st.Deliveries = adv.Deliveries
	st.Error = fmt.Sprintf("gave up after %d deliveries: the lease on the last one expired before %s recorded how it ended", adv.Deliveries, holder)
	st.Updated = w.opts.Now().UTC()
	if rev == 0 {
		_, err = w.kv.Create(ctx, j.ID, st.encode())
	} else {
		_, err = w.kv.Update(ctx, j.ID, st.encode(), rev)
	}
	if err != nil {
		log.Info("status changed meanwhile; leaving it", zap.Error(err))
		return
	}
	w.progress(st)
	log.Warn("job failed: its last delivery was lost", zap.String("holder", holder))
	// The work queue keeps a message nobody acked or terminated; its
	// record now says how it ended.
	if err := w.stream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Warn("remove the failed job from the queue", zap.Error(err))
	}
}
